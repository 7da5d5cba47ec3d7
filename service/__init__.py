"""The HTTP API and everything behind it that lives with SQL: auth, dispatch, collector."""
