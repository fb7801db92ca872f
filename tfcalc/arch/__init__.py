"""The model apart from the workload, and the one inventory of operations every figure folds over (no torch)."""

from .architecture import Layer, Stack, stacks
from .inventory import Group, Inventory, build, default_workload, validate
from .ops import AttentionCore, Elementwise, Mask, Matmul, Norm, Op, Table
from .workload import PHASES, Workload

__all__ = ["AttentionCore", "Elementwise", "Group", "Inventory", "Layer", "Mask", "Matmul", "Norm", "Op", "PHASES",
           "Stack", "Table", "Workload", "build", "default_workload", "stacks", "validate"]
