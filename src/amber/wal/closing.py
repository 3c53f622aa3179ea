"""``Closing``: a mixin that makes ``with obj:`` call ``obj.close()`` at the end."""

from __future__ import annotations

from typing import Self


class Closing:
    """Context manager support for a class with a ``close()`` method."""

    def close(self) -> None:
        """Release what the object holds (subclasses implement it)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
