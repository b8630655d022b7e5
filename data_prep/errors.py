"""The one exception data_prep raises for unusable input or configuration."""


class PrepError(ValueError):
    """Input or configuration that cannot be prepared; the message names the file/key and the fix.

    The CLI prints it as one line and exits 2, never with a traceback.
    """
