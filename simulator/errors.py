"""One error type for bad user input, so the CLI can print one line and exit 2."""


class ConfigError(ValueError):
    """Bad input. The message starts with the field it is about: 'engine.block_size: ...'."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)
