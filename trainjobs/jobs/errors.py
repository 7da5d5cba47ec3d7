"""Errors the service functions raise; the API turns each into its status code."""


class NotFound(Exception):
    """Unknown, or not the caller's (another owner's job is 404, never 403)."""


class Forbidden(Exception):
    """Authenticated, but asking for what only an admin may (another owner's job list)."""


class Conflict(Exception):
    pass


class InvalidRequest(Exception):
    """A request that parses but breaks a rule; `field` names what to fix."""

    def __init__(self, field: str, message: str, location: str = "body"):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.location = location
