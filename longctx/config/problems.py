"""What a check reports: one `Problem` per fault, naming the file, the key, what is wrong and the fix."""

from dataclasses import asdict, dataclass
from typing import Literal


@dataclass(frozen=True)
class Problem:
    """One reason a launch will fail (error) or run worse than it could (warning)."""

    severity: Literal["error", "warning"]
    file: str
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}: `{self.key}`: {self.message}; fix: {self.fix}"

    def line(self) -> str:
        return f"{self.severity}: {self.file}: `{self.key}`: {self.message}\n    fix: {self.fix}"

    def as_dict(self) -> dict:
        return asdict(self)


def error(file, key: str, message: str, fix: str) -> Problem:
    return Problem("error", str(file), key, message, fix)


def warning(file, key: str, message: str, fix: str) -> Problem:
    return Problem("warning", str(file), key, message, fix)
