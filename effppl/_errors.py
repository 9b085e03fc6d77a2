"""The base class of every error effppl raises."""


class EffpplError(Exception):
    """Base class of all effppl errors; each subclass also derives from a builtin."""
