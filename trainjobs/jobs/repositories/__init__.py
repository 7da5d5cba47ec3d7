"""SQL, one module per table. Functions take a Session and never commit: the caller owns the
transaction (one per request, one per applied event)."""
