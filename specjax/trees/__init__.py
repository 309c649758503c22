"""Token trees: their shape (`StaticTree`, `DynamicTree`), how a drafter grows them (`grow`), their place in one
target call (`layout`) and their exact acceptance (`rejection`)."""

from specjax.trees.dynamic import DynamicTree
from specjax.trees.static import StaticTree

TREES = (StaticTree, DynamicTree)
