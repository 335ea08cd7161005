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


class Stopped(KeyboardInterrupt):
    """A run stopped at a step boundary by the signal ``signum`` (under torchrun: every rank at the same
    step). A KeyboardInterrupt, so that it ends a run as Ctrl-C does."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
