"""Token trees: their shape (`StaticTree`, `DynamicTree`), how a drafter grows them (`grow`), their place in one
target call (`layout`), their exact acceptance (`rejection`) and static trees tuned to a drafter (`tune`)."""

from specjax.trees.dynamic import DynamicTree
from specjax.trees.static import StaticTree

TREES = (StaticTree, DynamicTree)
