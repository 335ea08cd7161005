"""The one exception type that the CLI turns into a single clear line.

Library code raises :class:`RlcapError` (or a subclass) for bad user input: a missing file,
an unknown config key, an image id absent from the references. The message names the item
and says what was expected. Programming errors stay ordinary exceptions.
"""


class RlcapError(Exception):
    """Bad input from the user: the message is shown as one line by the CLI."""


class ConfigError(RlcapError):
    """An unknown config key, a wrong type or an invalid value."""


class DataError(RlcapError):
    """A data file, image, caption or feature that cannot be used as given."""
