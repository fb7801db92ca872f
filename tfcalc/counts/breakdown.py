"""An ordered component -> integer mapping with totals and prefix subtotals."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class Breakdown(Mapping[str, int]):
    """Counts keyed by component name (`attention/qkv`, `mlp/up`, `head`, ...), in insertion order.

    Components whose count is zero are kept out, so every row shown is a row that exists.

    >>> b = Breakdown({"attention/qkv": 6, "attention/out": 2, "mlp/up": 8, "head": 0})
    >>> b.total, b.subtotal("attention"), list(b)
    (16, 8, ['attention/qkv', 'attention/out', 'mlp/up'])
    """

    def __init__(self, counts: Mapping[str, int]):
        self._counts = {name: value for name, value in counts.items() if value}

    def __getitem__(self, name: str) -> int:
        return self._counts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __repr__(self) -> str:
        return f"Breakdown({self._counts!r})"

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def subtotal(self, prefix: str) -> int:
        """Sum of the components named `prefix` or `prefix/...`."""
        return sum(v for k, v in self._counts.items() if k == prefix or k.startswith(prefix + "/"))

    def scaled(self, factor: int) -> Breakdown:
        return Breakdown({k: v * factor for k, v in self._counts.items()})

    def halved(self) -> Breakdown:
        """FLOPs -> MACs. Every matmul count is 2 * multiply-adds, so this is exact."""
        assert all(v % 2 == 0 for v in self._counts.values())
        return Breakdown({k: v // 2 for k, v in self._counts.items()})

    def to_dict(self) -> dict[str, int]:
        return dict(self._counts)
