"""The downstream classifiers as plain arrays, evaluated by numpy: what the analyst stores and
returns to every site, so loading a model never runs code and a site predicts without
scikit-learn.

Every model starts with the rotation-equivariant preprocessing of
:func:`common.downstream.fit_downstream`, ``u = (z - mu) / s`` (``mu`` the training mean of the
rows of ``Z``, ``s`` one global scale), then:

* ``logistic``: decisions ``u W^T + w0``; probabilities by softmax over the classes, or for two
  classes ``sigmoid(d)`` of the single decision (as scikit-learn's ``LogisticRegression``); the
  out-of-core fit's ``SGDClassifier`` (log loss, one-vs-rest beyond two classes) is exported as
  one too: the same labels, its probabilities the softmax of its decisions
  (:mod:`common.out_of_core`);
* ``mlp``: hidden layers ``a_{l+1} = act(a_l W_l + w_l)``, output by softmax (logistic for two
  classes), as ``MLPClassifier``;
* ``knn``: the ``k`` nearest training rows (Euclidean, ties to the lower row index), uniform
  vote, as ``KNeighborsClassifier``. A k-NN model holds the training rows of ``Z`` themselves.

:func:`export_estimator` turns a fitted scikit-learn estimator into one of these and checks that
both give the same labels and probabilities on the rows it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.models.container import ArraysFile, dump_arrays, load_arrays

#: Format name of a downstream model file.
MODEL_FORMAT = "noisyanchor.model"


def _expit(a: np.ndarray) -> np.ndarray:
    """The logistic function ``1 / (1 + exp(-a))`` (scipy's, imported here: scipy costs a
    process's start a second, issue 22)."""
    from scipy.special import expit

    return expit(a)


#: Hidden-layer activations an MLP may use (scikit-learn's names).
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda a: a, "logistic": _expit, "tanh": np.tanh,
    "relu": lambda a: np.maximum(a, 0.0)}

#: Query rows per block of the k-NN distance computation (bounds its memory).
KNN_BLOCK = 1024

#: Probabilities of an exported model must match the estimator's to this (absolute).
EXPORT_ATOL = 1e-12


@dataclass(frozen=True)
class Preprocessing:
    """``u = (z - mu) / s``.

    Attributes
    ----------
    center : (d,) ndarray
        ``mu``, the training mean of ``Z``.
    scale : float
        ``s > 0``, the root mean square of the centred training rows.
    """

    center: np.ndarray
    scale: float

    def apply(self, z: np.ndarray) -> np.ndarray:
        """``u`` for rows ``z`` (``n x d``)."""
        z = np.asarray(z, dtype=np.float64)
        if z.ndim != 2 or z.shape[1] != self.center.shape[0]:
            raise InvalidInputError(f"the model takes rows of width {self.center.shape[0]}, "
                                    f"got shape {z.shape}")
        if not np.isfinite(z).all():
            raise InvalidInputError("rows given to the model contain NaN or Inf")
        return (z - self.center) / self.scale


@dataclass(frozen=True)
class Classifier:
    """Common part of the models: the classes and the preprocessing.

    Attributes
    ----------
    name : str
        ``logistic``, ``mlp`` or ``knn``.
    classes : (c,) ndarray of int64
        Labels in the order of the probability columns (sorted, distinct).
    preprocessing : Preprocessing
    """

    kind: ClassVar[str]
    classes: np.ndarray
    preprocessing: Preprocessing

    @property
    def name(self) -> str:
        """The model's kind."""
        return self.kind

    @property
    def width(self) -> int:
        """``d``, the width of the rows of ``Z`` the model takes."""
        return int(self.preprocessing.center.shape[0])

    def predict_proba(self, z: np.ndarray) -> np.ndarray:
        """Class probabilities ``(n, c)`` of rows ``z`` of ``Z``'s frame (columns: ``classes``)."""
        return self._proba(self.preprocessing.apply(z))

    def predict(self, z: np.ndarray) -> np.ndarray:
        """Predicted labels ``(n,)`` of rows ``z``."""
        return self.classes[self._label_index(self.preprocessing.apply(z))]

    def _proba(self, u: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _label_index(self, u: np.ndarray) -> np.ndarray:
        return np.argmax(self._proba(u), axis=1)

    def _arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _meta(self) -> dict[str, Any]:
        return {}

    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)`` of the model (what :func:`model_from_arrays` reads back)."""
        meta = {"kind": self.kind, "scale": float(self.preprocessing.scale), **self._meta()}
        return meta, {"classes": self.classes, "center": self.preprocessing.center,
                      **self._arrays()}

    def to_bytes(self) -> bytes:
        """The model file (:mod:`common.models.container`)."""
        meta, arrays = self.to_arrays()
        return dump_arrays(MODEL_FORMAT, meta, arrays)


@dataclass(frozen=True)
class LogisticModel(Classifier):
    """Multinomial (or, for two classes, binary) logistic regression.

    Attributes
    ----------
    coef : (c, d) ndarray, or (1, d) for two classes
        ``W``.
    intercept : (c,) ndarray, or (1,)
        ``w0``.
    """

    kind: ClassVar[str] = "logistic"
    coef: np.ndarray
    intercept: np.ndarray

    def _decision(self, u: np.ndarray) -> np.ndarray:
        return u @ self.coef.T + self.intercept

    def _proba(self, u: np.ndarray) -> np.ndarray:
        from scipy.special import expit, softmax

        d = self._decision(u)
        if self.coef.shape[0] == 1:
            p = expit(d[:, 0])
            return np.column_stack([1.0 - p, p])
        return softmax(d, axis=1)

    def _label_index(self, u: np.ndarray) -> np.ndarray:
        # From the decisions, as scikit-learn does (a probability may round to a tie).
        d = self._decision(u)
        return (d[:, 0] > 0).astype(np.intp) if self.coef.shape[0] == 1 else np.argmax(d, axis=1)

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"coef": self.coef, "intercept": self.intercept}


@dataclass(frozen=True)
class MlpModel(Classifier):
    """A multi-layer perceptron.

    Attributes
    ----------
    weights : tuple of (d_l, d_{l+1}) ndarrays
        ``W_l``, input layer first.
    biases : tuple of (d_{l+1},) ndarrays
        ``w_l``.
    activation : str
        Hidden activation, a key of :data:`ACTIVATIONS`.
    """

    kind: ClassVar[str] = "mlp"
    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    activation: str

    def _output(self, u: np.ndarray) -> np.ndarray:
        act = ACTIVATIONS[self.activation]
        a = u
        for layer, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            a = a @ w + b
            if layer < len(self.weights) - 1:
                a = act(a)
        return a

    def _proba(self, u: np.ndarray) -> np.ndarray:
        from scipy.special import expit, softmax

        out = self._output(u)
        if out.shape[1] == 1:
            p = expit(out[:, 0])
            return np.column_stack([1.0 - p, p])
        return softmax(out, axis=1)

    def _label_index(self, u: np.ndarray) -> np.ndarray:
        p = self._proba(u)
        if len(self.biases[-1]) == 1:  # scikit-learn thresholds the one logistic output at 0.5
            return (p[:, 1] > 0.5).astype(np.intp)
        return np.argmax(p, axis=1)

    def _meta(self) -> dict[str, Any]:
        return {"activation": self.activation, "layers": len(self.weights)}

    def _arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            out[f"weights.{i}"], out[f"biases.{i}"] = w, b
        return out


@dataclass(frozen=True)
class KnnModel(Classifier):
    """``k`` nearest neighbours with a uniform vote.

    Attributes
    ----------
    train : (m, d) ndarray
        The preprocessed training rows ``u`` of ``Z``.
    train_index : (m,) ndarray of int64
        Class index (into ``classes``) of each training row.
    k : int
    """

    kind: ClassVar[str] = "knn"
    train: np.ndarray
    train_index: np.ndarray
    k: int

    def _proba(self, u: np.ndarray) -> np.ndarray:
        # Brute force in blocks of query rows: memory KNN_BLOCK x m, whatever the query count.
        out = np.zeros((len(u), len(self.classes)))
        sq = np.einsum("ij,ij->i", self.train, self.train)
        for start in range(0, len(u), KNN_BLOCK):
            block = u[start:start + KNN_BLOCK]
            dist = sq[None, :] - 2.0 * block @ self.train.T
            nearest = np.argsort(dist, axis=1, kind="stable")[:, :self.k]
            votes = self.train_index[nearest]
            for c in range(len(self.classes)):  # one pass per class: c is small
                out[start:start + len(block), c] = np.count_nonzero(votes == c, axis=1)
        return out / self.k

    def _meta(self) -> dict[str, Any]:
        return {"k": int(self.k)}

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"train": self.train, "train_index": self.train_index}


#: Model kinds by name.
KINDS: dict[str, type[Classifier]] = {m.kind: m for m in (LogisticModel, MlpModel, KnnModel)}


def _array(arrays: Mapping[str, np.ndarray], name: str, shape: tuple[int | None, ...],
           kind: str) -> np.ndarray:
    """``arrays[name]`` checked against ``shape`` (None: any length) and dtype kind."""
    if name not in arrays:
        raise InvalidInputError(f"the model has no array {name!r}")
    a = arrays[name]
    if a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape,
                                                                             strict=True)):
        raise InvalidInputError(f"model array {name!r} has shape {a.shape}, expected "
                                f"{tuple('*' if s is None else s for s in shape)}")
    if a.dtype.kind not in kind:
        raise InvalidInputError(f"model array {name!r} has dtype {a.dtype}, expected "
                                f"{'floats' if kind == 'f' else 'integers'}")
    return a


def _meta_value(meta: Mapping[str, Any], key: str, types: tuple[type, ...]) -> Any:
    value = meta.get(key)
    if not isinstance(value, types) or isinstance(value, bool):
        names = " or ".join(t.__name__ for t in types)
        raise InvalidInputError(f"the model's {key!r} must be {names}, got {value!r}")
    return value


def model_from_arrays(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Classifier:
    """Build and check a model from the ``(meta, arrays)`` of :meth:`Classifier.to_arrays`.

    Raises
    ------
    InvalidInputError
        An unknown kind, unknown or missing entries, shapes that do not fit together, classes
        that are not distinct sorted integers, a scale that is not positive.
    """
    kind = meta.get("kind")
    if kind not in KINDS:
        raise InvalidInputError(f"unknown model kind {kind!r}; this version reads "
                                f"{', '.join(KINDS)}")
    classes = _array(arrays, "classes", (None,), "iu").astype(np.int64)
    if len(classes) < 2 or not np.all(np.diff(classes) > 0):
        raise InvalidInputError("the model's classes must be at least 2 distinct labels in "
                                "increasing order")
    center = _array(arrays, "center", (None,), "f")
    d, c = len(center), len(classes)
    scale = float(_meta_value(meta, "scale", (int, float)))
    if not np.isfinite(scale) or scale <= 0:
        raise InvalidInputError(f"the model's scale must be positive, got {scale}")
    pre = Preprocessing(np.asarray(center, dtype=np.float64), scale)
    model: Classifier
    if kind == "logistic":
        rows = 1 if c == 2 else c
        model = LogisticModel(classes, pre, _array(arrays, "coef", (rows, d), "f"),
                              _array(arrays, "intercept", (rows,), "f"))
        meta_keys, names = {"kind", "scale"}, {"classes", "center", "coef", "intercept"}
    elif kind == "mlp":
        layers = _meta_value(meta, "layers", (int,))
        activation = meta.get("activation")
        if activation not in ACTIVATIONS:
            raise InvalidInputError(f"unknown MLP activation {activation!r}; expected one of "
                                    f"{', '.join(ACTIVATIONS)}")
        if not 1 <= layers <= 64:
            raise InvalidInputError(f"an MLP has 1 to 64 layers, got {layers}")
        weights, biases, width = [], [], d
        for i in range(layers):
            w = _array(arrays, f"weights.{i}", (width, None), "f")
            width = w.shape[1]
            weights.append(w)
            biases.append(_array(arrays, f"biases.{i}", (width,), "f"))
        if width != (1 if c == 2 else c):
            raise InvalidInputError(f"the MLP's output layer has {width} units for {c} classes")
        model = MlpModel(classes, pre, tuple(weights), tuple(biases), activation)
        meta_keys = {"kind", "scale", "activation", "layers"}
        names = {"classes", "center"} | {f"{p}.{i}" for p in ("weights", "biases")
                                         for i in range(layers)}
    else:
        k = _meta_value(meta, "k", (int,))
        train = _array(arrays, "train", (None, d), "f")
        index = _array(arrays, "train_index", (len(train),), "iu").astype(np.int64)
        if not 1 <= k <= len(train):
            raise InvalidInputError(f"k = {k} must be between 1 and the {len(train)} training "
                                    "rows")
        if len(index) and (index.min() < 0 or index.max() >= c):
            raise InvalidInputError("the k-NN training rows name classes the model does not have")
        model = KnnModel(classes, pre, train, index, k)
        meta_keys, names = {"kind", "scale", "k"}, {"classes", "center", "train", "train_index"}
    if set(meta) != meta_keys or set(arrays) != names:
        extra = sorted((set(meta) - meta_keys) | (set(arrays) - names))
        missing = sorted((meta_keys - set(meta)) | (names - set(arrays)))
        raise InvalidInputError(f"a {kind} model has entries "
                                + (f"it does not know: {extra}" if extra else "")
                                + ("; " if extra and missing else "")
                                + (f"missing: {missing}" if missing else ""))
    return model


def load_model(raw: bytes, *, what: str = "the model file") -> Classifier:
    """A model from its file's bytes (:meth:`Classifier.to_bytes`), checked entry by entry."""
    loaded: ArraysFile = load_arrays(raw, MODEL_FORMAT, what=what)
    try:
        return model_from_arrays(loaded.meta, loaded.arrays)
    except InvalidInputError as err:
        raise InvalidInputError(f"{what}: {err}") from None


def export_estimator(estimator: Any, center: np.ndarray, scale: float,
                     check_rows: np.ndarray | None = None) -> Classifier:
    """The numpy model of a fitted scikit-learn ``LogisticRegression``, ``SGDClassifier`` (log
    loss), ``MLPClassifier`` or ``KNeighborsClassifier`` (uniform weights, Euclidean) behind
    ``u = (z - center) / scale``.

    Parameters
    ----------
    estimator
        Fitted on the preprocessed rows ``u``.
    center : (d,) ndarray
    scale : float
    check_rows : (n, d) ndarray, optional
        Rows of ``Z``: both must give the same labels and probabilities (an SGD model: decisions)
        within :data:`EXPORT_ATOL` on them, else the export is refused.

    Raises
    ------
    InvalidInputError
        Another estimator or setting, or a check that fails.
    """
    pre = Preprocessing(np.array(center, dtype=np.float64), float(scale))
    classes = np.asarray(estimator.classes_)
    if classes.dtype.kind not in "iu":
        raise InvalidInputError(f"only integer labels can be exported, got {classes.dtype}")
    classes = classes.astype(np.int64)
    kind = type(estimator).__name__
    model: Classifier
    linear = kind == "LogisticRegression" or (kind == "SGDClassifier"
                                              and estimator.loss == "log_loss")
    if linear:
        model = LogisticModel(classes, pre, np.array(estimator.coef_, dtype=np.float64),
                              np.array(estimator.intercept_, dtype=np.float64))
    elif kind == "MLPClassifier":
        if estimator.activation not in ACTIVATIONS:
            raise InvalidInputError(f"MLP activation {estimator.activation!r} cannot be exported")
        model = MlpModel(classes, pre, tuple(np.array(w, dtype=np.float64)
                                             for w in estimator.coefs_),
                         tuple(np.array(b, dtype=np.float64) for b in estimator.intercepts_),
                         estimator.activation)
    elif kind == "KNeighborsClassifier":
        if estimator.weights != "uniform" or estimator.effective_metric_ != "euclidean":
            raise InvalidInputError("only uniform-vote Euclidean k-NN can be exported")
        model = KnnModel(classes, pre, np.array(estimator._fit_X, dtype=np.float64),
                         np.array(estimator._y, dtype=np.int64), int(estimator.n_neighbors))
    else:
        raise InvalidInputError(f"a {kind} cannot be exported; the built-in models are "
                                f"{', '.join(KINDS)}")
    model = model_from_arrays(*model.to_arrays())  # the same checks as a loaded file
    if check_rows is not None and len(check_rows):
        u = pre.apply(check_rows)
        if kind == "SGDClassifier" and isinstance(model, LogisticModel):
            # One-vs-rest probabilities of its own (not the file's softmax): the decisions.
            theirs = estimator.decision_function(u).reshape(len(u), -1)
            ours = model._decision(u)
        else:
            theirs = estimator.predict_proba(u)
            ours = model.predict_proba(check_rows)
        if not np.array_equal(estimator.predict(u), model.predict(check_rows)) or \
                not np.allclose(ours, theirs, rtol=0, atol=EXPORT_ATOL):
            raise InvalidInputError(
                f"the exported {model.name} model does not reproduce scikit-learn's "
                f"predictions (largest difference "
                f"{float(np.max(np.abs(ours - theirs))):.2g})")
    return model
