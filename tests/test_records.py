"""Op records answer every figure for themselves: a fold is a sum over records, and a record that lacks a figure
is refused by name (fvcore's unsupported_ops()), never counted as 0."""

from dataclasses import dataclass, replace

import pytest

from tfcalc import build, load_preset
from tfcalc.arch import Group
from tfcalc.arch.ops import (
    AttentionCore,
    Elementwise,
    Matmul,
    Norm,
    Parallel,
    Record,
    Table,
    UnsupportedFigure,
)
from tfcalc.blocks.conv.records import Conv
from tfcalc.counts import folds

FIGURES = {  # every figure a record answers, with arguments
    "params": (), "parameters": (), "inactive_params": (), "matrix_params": (), "forward": (), "masked": (True,),
    "non_matmul": (), "names": (), "cache": (), "cache_per_token": (), "state": (), "cost": (2, 2, 2, 1), "collective": (2, 2),
    "tensors": (1, 1, False), "saved": (2, "none", Parallel()), "gemm": (), "scores": (), "transient": (Parallel(),),
}


@dataclass(frozen=True, slots=True)
class Scan(Record):
    """A record type a new block kind might add, before it defines its figures."""

    component: str = "mixer/scan"
    role: str = ""
    sublayer: str = "mixer"


def test_every_figure_of_a_record_without_it_is_refused_by_name():
    for figure, args in FIGURES.items():
        with pytest.raises(UnsupportedFigure, match=rf"^Scan 'mixer/scan' does not define {figure}: "):
            getattr(Scan(), figure)(*args)


def test_the_record_types_define_every_figure():
    records = [Matmul("mlp/up", 4, 8, 16), AttentionCore("attention", 1, 2, 4, 4, 8, 8, mask=None),
               Table("embedding/token", 10, 8), Norm("mlp/norm", "rmsnorm", 4, 8), Elementwise("residual",
                                                                                             "residual", 32, 1),
               Conv("conv/conv", 2, 4, 8, 3, 6)]
    for record in records:
        assert set(FIGURES) <= {name for name in dir(record) if not name.startswith("_")}
        for figure in FIGURES:  # defined on the type itself, not the raising default
            assert getattr(type(record), figure) is not getattr(Record, figure), (type(record).__name__, figure)


def test_a_fold_over_an_inventory_with_an_unknown_record_raises():
    inv = build(load_preset("gpt2"))
    with_scan = replace(inv, groups=(*inv.groups, Group("block (mixer)", 3, (Scan(),))))
    for fold, args in [(folds.params, ()), (folds.forward, ()), (folds.masked_attention, (False,)),
                       (folds.non_matmul, ()), (folds.kv_cache, ()), (folds.kv_per_token, ()),
                       (folds.matmul_weights, ()), (folds.inactive_params, ()), (folds.state, ())]:
        with pytest.raises(UnsupportedFigure, match="Scan 'mixer/scan' does not define"):
            fold(with_scan, *args)


def test_roles_not_names():
    # what the plans ask of a record is its role: the head's loss, the router's routing, the encoder's output
    inv = build(load_preset("mixtral-8x7b"))
    roles = {op.component: op.role for op, _ in inv}
    assert roles["head"] == "head" and roles["moe/router"] == "router" and roles["moe/routing"] == "routing"
    assert {op.component for op, _ in inv if op.expert} == {"moe/experts"}
    t5 = build(load_preset("t5-small"))
    assert [op.component for op, _ in t5 if op.role == "encoder_kv"] == ["decoder/cross_attention/kv"]
    bert = build(load_preset("bert-base"))
    assert [op.component for op, _ in bert if op.role == "pooler"] == ["pooler"]


def test_every_record_knows_the_sublayer_that_made_it():
    inv = build(load_preset("gpt2"))
    assert {(g.kind, op.sublayer) for g in inv.groups for op in g.ops} == {
        ("embedding", "embedding"), ("block", "attention"), ("block", "mlp"), ("final_norm", "final_norm"),
        ("head", "head")}
    assert inv.families()["attention/scores"] == "attention" and inv.families()["mlp/up"] == "mlp"


def test_a_kind_of_a_family_the_crossover_does_not_know_counts_as_other_work():
    from tfcalc.arch.builders import KINDS, BlockKind, register
    from tfcalc.counts.estimates import _families

    inv = build(load_preset("gpt2"))
    mixer = Matmul("mixer/in_proj", 4, 8, 16, sublayer="mixer")  # [4, 8] @ [8, 16]: 2 * 4 * 8 * 16 FLOPs
    register(BlockKind("mixer", lambda ctx: [mixer], family="mixer"))
    try:
        with_mixer = replace(inv, groups=(*inv.groups, Group("block (mixer)", 3, (mixer,))))
        assert _families(with_mixer) == _families(inv)  # linear attention, scores and values, MLP: unchanged
        assert with_mixer.families()["mixer/in_proj"] == "mixer"
    finally:
        del KINDS["mixer"]


def _record_types() -> set[type]:
    import tfcalc.blocks  # noqa: F401  (every kind, and the record types of their own)
    from tfcalc.arch.builders import KINDS

    list(KINDS)  # the lazily registered kinds too

    found, todo = set(), [Record]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("tfcalc.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_record_type_of_every_kind_answers_or_refuses_by_name():
    """The kinds' own record types (Mamba2's scan, the delta rule) define every figure but `saved`, which a type may
    leave to Record: refused by name (training memory says which record), never counted as 0."""
    kinds = {t.__name__ for t in _record_types()}
    assert {"Matmul", "AttentionCore", "Table", "Norm", "Elementwise", "Conv", "SSDScan", "DeltaRule"} <= kinds
    for record_type in _record_types():
        for figure in set(FIGURES) - {"saved", "transient"}:  # training figures: refused by name where not modelled
            assert getattr(record_type, figure) is not getattr(Record, figure), (record_type.__name__, figure)
