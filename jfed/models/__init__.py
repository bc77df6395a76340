"""Models: static, hashable objects with pure ``init / loss / correct`` functions written for one
client's minibatch (:class:`Model`), so any federated algorithm can train any of them.

- :class:`DenseClassifier`: multinomial logistic regression or one hidden ReLU layer (DP-FedAvg's
  original models, same initialisation and numbers).
- :class:`CharLSTM`: the character LSTM of McMahan et al. 2017 and LEAF (Shakespeare).
- :class:`FemnistCNN`: LEAF's FEMNIST CNN.
- :class:`CifarCNN`: pfl-research's CIFAR-10 CNN.
- :class:`TransformerLM`: pfl-research's small Transformer language model (StackOverflow size).

Parameter counts, checked by the tests against the papers' and pfl-research's numbers, are listed
in docs/reference/models.md.
"""

from jfed.models.base import Model, PyTree, tree_size
from jfed.models.cnn import CifarCNN, FemnistCNN
from jfed.models.language import CharLSTM, TransformerLM
from jfed.models.linear import DenseClassifier

MODELS = {
    "logistic": DenseClassifier,
    "mlp": DenseClassifier,
    "char-lstm": CharLSTM,
    "femnist-cnn": FemnistCNN,
    "cifar-cnn": CifarCNN,
    "transformer-lm": TransformerLM,
}
"""Model names (a command-line flag's choices) -> their classes. ``logistic`` and ``mlp`` are both
:class:`DenseClassifier` (``hidden = 0`` or > 0)."""

__all__ = [
    "MODELS",
    "CharLSTM",
    "CifarCNN",
    "DenseClassifier",
    "FemnistCNN",
    "Model",
    "PyTree",
    "TransformerLM",
    "tree_size",
]
