"""The downstream model, trained on the aligned training rows of ``Z`` (by the analyst, the demo
and the simulator alike; scikit-learn, from the ``eval`` extra, is imported only when fitting).

Preprocessing is rotation-equivariant on purpose (center by the training mean, divide by one
global scale): a classifier must not be able to undo or exploit a rotation per feature, so the
methods are compared on what their alignment preserves. The default model (L2 logistic regression)
is itself rotation invariant. Model selection, when validation rows exist, picks the
regularisation on validation balanced accuracy.

The model is pluggable: a name from :data:`MODELS` or any callable ``c -> estimator`` returning an
unfitted scikit-learn-style classifier (``fit``/``predict``) for hyper-parameter ``c`` (searched
over :data:`C_GRID`, or the model's own grid in :data:`GRIDS`). Every built-in model fixes its
random state, so every method and noise draw gets the same initialisation and data order (as in
the paper). Built-in models: L2 logistic regression, a one-hidden-layer MLP, and k-nearest
neighbours (Euclidean, so also rotation invariant; ``k`` chosen on validation); and for the
membership bench an MLP without penalty that overfits on purpose (``mlp-overfit``, in
:data:`BENCH_MODELS` only).

How it is fitted (:data:`FIT_MODES`): in memory, or for the logistic model out of core, a chunk
of rows at a time (:mod:`common.out_of_core`), by default once the training rows would take more
than :data:`IN_MEMORY_MAX_BYTES`. The search over ``C`` is kept whole: a warm-started search and
one on a subsample of the training rows chose another ``C`` than it on 3 and 5 of 10 digits
splits (``benchmarks/bench_search.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import resource
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from noisyanchor.common.chunks import predict_chunked, row_chunks, rows_of
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION

#: Regularisation grid searched on validation rows (inverse strength ``C``).
C_GRID = (0.01, 0.1, 1.0, 10.0)
#: Neighbour counts searched on validation rows by the k-NN model.
K_GRID = (1, 3, 5, 9, 15)
#: ``C`` values (L2 penalty ``alpha = 1 / C``) searched by the MLP: on a small digits sweep over
#: the four values of :data:`C_GRID` these two won 33 of 34 selections, and each fit costs 300
#: epochs (the MLP dominated the sweep's time).
MLP_GRID = (1.0, 10.0)
#: How the downstream model is fitted (``[model] fit`` of the analyst's config): ``auto`` fits
#: the logistic model out of core (:mod:`common.out_of_core`) once its standardised training
#: rows would take more than :data:`IN_MEMORY_MAX_BYTES`, in memory below; ``dask`` on a Dask
#: cluster (:mod:`common.dask_fit`), named with its scheduler (:func:`on_dask`).
FIT_MODES = ("auto", "in-memory", "out-of-core", "dask")
#: Models that can be fitted out of core, or on a Dask cluster.
OUT_OF_CORE_MODELS = ("logistic",)


def on_dask(scheduler: str) -> str:
    """The fit mode ``dask`` on ``scheduler`` (``local`` or ``tcp://HOST:PORT``) as the one
    value the fit takes (``dask@<scheduler>``), passed down unchanged wherever a fit mode is."""
    return f"dask@{scheduler}"


def _usable_memory() -> int:
    """The memory this process may use, in bytes: the least of the host's physical memory
    (``sysconf``; 8 GiB where it cannot say), the process's limits on its address space
    (``RLIMIT_AS``, e.g. ``prlimit --as``) and on its private memory (``RLIMIT_DATA``,
    ``prlimit --data``), and a container's cgroup v2 ``memory.max``."""
    try:
        limits = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux/macOS
        limits = [8 << 30]
    for kind in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft, _ = resource.getrlimit(kind)
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    with contextlib.suppress(OSError, ValueError):  # no cgroup v2 file, or "max"
        with open("/sys/fs/cgroup/memory.max") as fh:
            limits.append(int(fh.read()))
    return min(limits)


#: ``auto`` fits out of core above this many bytes of standardised training rows
#: (``8 n_train d``): an eighth of the usable memory (:func:`_usable_memory`, read at import),
#: as the in-memory fit holds about three copies of them (the rows, the solver's, its
#: gradients') beside ``Z``'s own pages and the rest of the analyst.
IN_MEMORY_MAX_BYTES = _usable_memory() // 8


@dataclass(frozen=True)
class Utility:
    """Held-out balanced accuracy of the downstream classifier and the chosen hyper-parameter
    ``c`` (``C`` of the regularised models, ``k`` of k-NN).

    ``converged`` says whether the chosen fit's optimiser met its own tolerance within its
    iteration cap (scikit-learn's ``ConvergenceWarning`` is caught and recorded here, never
    printed); ``fits_not_converged`` counts the fits of the hyper-parameter search that did
    not.

    ``participant_only_balanced_accuracy`` (when participants are given) is the same model
    trained on the one-hot participant index alone: what a classifier gets from knowing whose
    record it is, without any shared feature. A method whose ``Z`` keeps participants apart but
    shares nothing else (I-GDP) scores near it, and it can lie well below chance: train and
    test class counts of one participant are anti-correlated under a global stratified split.
    """

    balanced_accuracy: float
    validation_balanced_accuracy: float | None
    c: float
    n_train: int
    n_test: int
    participant_only_balanced_accuracy: float | None = None
    converged: bool = True
    fits_not_converged: int = 0


def _logistic(c: float) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=2000, random_state=0)


def _mlp(c: float) -> Any:
    """One hidden layer of 64 units; ``c`` maps to the L2 penalty ``alpha = 1 / c``."""
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=(64,), alpha=1.0 / c, max_iter=300,
                         random_state=0)


def _mlp_overfit(c: float) -> Any:
    """The MLP of :func:`_mlp` without its L2 penalty (``c`` is unused): an instrument of the
    membership bench, not a model to deploy. On digits projected to h = 16 (960 training rows)
    it fits its training rows to 0.99 accuracy against 0.88 on test rows, where the
    regularised models' gap is a few points; a model that remembers its rows is what a
    membership attack needs in order to be able to succeed."""
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=(64,), alpha=0.0, max_iter=300, random_state=0)


def _knn(k: float) -> Any:
    """``k`` nearest neighbours (uniform vote, Euclidean distance)."""
    from sklearn.neighbors import KNeighborsClassifier

    return KNeighborsClassifier(n_neighbors=int(k))


#: Built-in downstream models by name: ``c -> unfitted estimator``.
MODELS: dict[str, Callable[[float], Any]] = {"logistic": _logistic, "mlp": _mlp, "knn": _knn}
#: Every model the evaluation bench may fit: :data:`MODELS` and the membership bench's
#: overfit MLP, which no analyst config accepts.
BENCH_MODELS: dict[str, Callable[[float], Any]] = {**MODELS, "mlp-overfit": _mlp_overfit}
#: Hyper-parameter grids of the built-in models that do not search :data:`C_GRID`.
GRIDS: dict[str, tuple[float, ...]] = {"knn": K_GRID, "mlp": MLP_GRID, "mlp-overfit": (1.0,)}


def sklearn_available() -> bool:
    """Whether scikit-learn (the ``eval`` extra) is installed, found without importing it (with
    pandas, which it imports, a second of the analyst's start)."""
    return importlib.util.find_spec("sklearn") is not None


def _fit_predict(x_tr, y_tr, x_ev, c: float, model: Callable[[float], Any]) -> np.ndarray:
    return fit_model(model, c, x_tr, y_tr)[0].predict(x_ev)


@contextlib.contextmanager
def warnings_to_log(logger: logging.Logger) -> Iterator[None]:
    """Warnings raised inside (scikit-learn's, about a small site's rows) go to ``logger`` at
    DEBUG, each text once, not to the terminal: a site's command prints its own findings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for text in dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught):
        logger.debug("%s", text)


def fit_model(model: Callable[[float], Any], c: float, x: np.ndarray,
              y: np.ndarray, weights: np.ndarray | None = None) -> tuple[Any, bool]:
    """``model(c)`` fitted on ``(x, y)`` (each row weighted by ``weights`` when given), and
    whether its optimiser converged (no ``ConvergenceWarning``; the warning is recorded by the
    caller, not printed)."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        fitted = (model(c).fit(x, y) if weights is None
                  else model(c).fit(x, y, sample_weight=weights))
    return fitted, not any(issubclass(w.category, ConvergenceWarning) for w in caught)


def _select(x_tr, y_tr, x_va, y_va, grid: tuple[float, ...], model: Callable[[float], Any],
            score: Callable[[np.ndarray, np.ndarray], float]
            ) -> tuple[float, float, Any, bool, int]:
    """Fit one model per grid value on the training rows; the best on validation, its score,
    its fitted estimator (kept for the test rows: refitting the same data would repeat it),
    whether it converged and how many fits of the grid did not."""
    best: tuple[float, float, Any, bool] | None = None
    missed = 0
    for c in grid:
        fitted, converged = fit_model(model, c, x_tr, y_tr)
        missed += not converged
        s = float(score(y_va, fitted.predict(x_va)))
        if best is None or s > best[1]:
            best = (c, s, fitted, converged)
    assert best is not None
    return (*best, missed)


@dataclass(frozen=True)
class FittedDownstream:
    """A downstream model fitted by :func:`fit_downstream`, with what it needs to predict.

    Attributes
    ----------
    utility : Utility
        Its held-out metrics (without the participant-only baseline).
    estimator
        The fitted scikit-learn classifier, on the preprocessed rows ``u = (z - mu) / s``.
    center : (d,) ndarray
        ``mu``, the mean of the training rows.
    scale : float
        ``s``, the root mean square of the centred training rows (1 when they are all equal).
    """

    utility: Utility
    estimator: Any
    center: np.ndarray
    scale: float

    def predict(self, z: np.ndarray, flags: np.ndarray | None = None) -> np.ndarray:
        """Predicted labels of the rows of ``z`` (``(m, d)``, in the frame it was fitted in)
        flagged by ``flags`` (all without), a chunk at a time (:func:`common.chunks.predicted`):
        no standardised copy of ``z``."""
        return predict_chunked(lambda part: self.estimator.predict(
            (np.asarray(part, dtype=float) - self.center) / self.scale), z, flags)


def _model_and_grid(model: str | Callable[[float], Any]
                    ) -> tuple[Callable[[float], Any], tuple[float, ...]]:
    if not isinstance(model, str):
        return model, C_GRID
    if model not in BENCH_MODELS:
        raise InvalidInputError(f"unknown downstream model {model!r}; expected one of "
                                f"{', '.join(BENCH_MODELS)}")
    return BENCH_MODELS[model], GRIDS.get(model, C_GRID)


def _balanced_accuracy() -> Callable[[np.ndarray, np.ndarray], float]:
    """scikit-learn's balanced accuracy, without its warnings about predicted classes absent
    from the true labels or a single label in both: a small site's test rows often lack a
    class, and a site may hold one class only; both are expected (and said by
    :mod:`common.comparison`)."""
    try:
        from sklearn.metrics import balanced_accuracy_score
    except ImportError as err:  # pragma: no cover - depends on the install
        raise InvalidInputError("utility needs scikit-learn: pip install 'noisyanchor[eval]'") \
            from err

    def score(y_true: np.ndarray, y_pred: np.ndarray) -> float:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
            # Test rows of one class, all predicted right: a site's ordinary case too.
            warnings.filterwarnings("ignore", message="A single label was found")
            return float(balanced_accuracy_score(y_true, y_pred))

    return score


def standardisation(z: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, float]:
    """``mu``, the mean of the rows of ``z`` flagged by ``rows``, and ``s``, the root mean
    square of those rows once centred (1 when they are all equal), in chunks of
    :data:`common.chunks.CHUNK_ROWS` rows: no copy of ``z``.

    Parameters
    ----------
    z : (n, d) ndarray
        ``Z`` (or a memory map of it).
    rows : (n,) bool ndarray
        The rows the preprocessing is learned on (the training rows).
    """
    count = int(rows.sum())
    total = np.zeros(z.shape[1])
    for chunk in row_chunks(len(z), release=z):
        total += z[chunk][rows[chunk]].sum(axis=0)
    mean = total / count
    squares = 0.0
    for chunk in row_chunks(len(z), release=z):
        centred = z[chunk][rows[chunk]] - mean
        squares += float(np.einsum("ij,ij->", centred, centred))
    return mean, float(np.sqrt(squares / (count * z.shape[1]))) or 1.0


def standardised(z: np.ndarray, rows: np.ndarray, mean: np.ndarray,
                 scale: float) -> np.ndarray:
    """``u = (z - mu) / s`` of the rows of ``z`` flagged by ``rows`` only, gathered chunk by
    chunk into one array (the only copy; ``(sum(rows), d)``) and standardised in place."""
    out = rows_of(z, rows)
    out -= mean
    out /= scale
    return out


def fit_downstream(
    z: np.ndarray, labels: np.ndarray, tags: np.ndarray, *,
    model: str | Callable[[float], Any] = "logistic", rows: np.ndarray | None = None,
    fit: str = "auto",
) -> FittedDownstream:
    """Train on TRAIN rows, select ``C`` on VALIDATION rows (if any), score on TEST rows, and
    keep the fitted model with its preprocessing ``u = (z - mu) / s``.

    Parameters
    ----------
    z : (n, d) ndarray
        Collaboration matrix ``Z`` (or any records in one frame).
    labels : (n,) ndarray
    tags : (n,) ndarray of {0: train, 1: validation, 2: test}
    model : str or callable
        A name from :data:`MODELS` or ``c -> unfitted estimator`` (searched over
        :data:`C_GRID`).
    rows : (n,) bool ndarray, optional
        The rows to use (default all): the others are neither trained on, chosen on nor
        scored, as if ``z``, ``labels`` and ``tags`` held only these rows, without copying
        ``z`` (the leave-one-site-out refits).
    fit : str
        One of :data:`FIT_MODES` (:func:`fits_out_of_core`).

    Only the training, validation and test rows are standardised (each in its own array, in
    chunks of :data:`common.chunks.CHUNK_ROWS`), never a copy of the whole of ``z``: ``z`` may
    be a memory map larger than the memory. Out of core not even these: each chunk is
    standardised as it is read (:func:`common.out_of_core.fit_out_of_core`).
    """
    name = model
    model, grid = _model_and_grid(model)
    score = _balanced_accuracy()
    z = np.asarray(z, dtype=float)
    labels = np.asarray(labels)
    tags = np.asarray(tags)
    if not (len(z) == len(labels) == len(tags)):
        raise InvalidInputError(f"Z ({len(z)} rows), labels ({len(labels)}) and tags "
                                f"({len(tags)}) must have the same length")
    if rows is not None:
        rows = np.asarray(rows, dtype=bool)
        if rows.shape != tags.shape:
            raise InvalidInputError(f"rows must give one flag per row of Z ({len(tags)}), got "
                                    f"shape {rows.shape}")
        tags = np.where(rows, tags, -1)  # a tag of no split: neither trained, chosen nor scored
    tr, va, te = (tags == TRAIN), (tags == VALIDATION), (tags == TEST)
    if not tr.any() or not te.any():
        raise InvalidInputError("utility needs both training and test rows")
    if len(np.unique(labels[tr])) < 2:
        raise InvalidInputError("the training rows hold a single class; a classifier needs at "
                                "least two")
    mean, scale = standardisation(z, tr)
    route = fit_route(fit, name, int(tr.sum()), z.shape[1])
    if route != "in-memory":
        return _fit_chunked(route, fit, z, labels, (tr, va, te), mean, scale, grid)
    x_tr = standardised(z, tr, mean, scale)
    if va.any():
        best_c, val, fitted, converged, missed = _select(
            x_tr, labels[tr], standardised(z, va, mean, scale), labels[va], grid, model, score)
        val_score: float | None = val
    else:
        best_c, val_score = grid[len(grid) // 2], None
        fitted, converged = fit_model(model, best_c, x_tr, labels[tr])
        missed = int(not converged)
    del x_tr  # dropped before the test rows are standardised (unless the estimator keeps it)
    tested = fitted.predict(standardised(z, te, mean, scale))
    utility = Utility(float(score(labels[te], tested)), val_score, best_c, int(tr.sum()),
                      int(te.sum()), converged=converged, fits_not_converged=missed)
    return FittedDownstream(utility, fitted, mean, scale)


def fit_route(fit: str, model: str | Callable[[float], Any], n_train: int, d: int) -> str:
    """How ``fit`` (one of :data:`FIT_MODES`, ``dask`` as :func:`on_dask` names it) fits
    ``model`` on ``n_train`` training rows of width ``d``: ``in-memory``, ``out-of-core``
    (``auto`` above :data:`IN_MEMORY_MAX_BYTES` for the models of :data:`OUT_OF_CORE_MODELS`;
    the others are always fitted in memory) or ``dask``.

    Raises
    ------
    InvalidInputError
        An unknown mode, or ``out-of-core`` or ``dask`` for a model that cannot be.
    """
    mode = fit.partition("@")[0]
    if mode not in FIT_MODES:
        raise InvalidInputError(f"unknown fit {fit!r}; expected one of {', '.join(FIT_MODES)}")
    if mode in ("out-of-core", "dask") and model not in OUT_OF_CORE_MODELS:
        raise InvalidInputError(f"only the {', '.join(OUT_OF_CORE_MODELS)} model can be fitted "
                                f"{'out of core' if mode == 'out-of-core' else 'on Dask'}, not "
                                f"{model!r}")
    if mode == "auto":
        big = model in OUT_OF_CORE_MODELS and 8 * n_train * d > IN_MEMORY_MAX_BYTES
        return "out-of-core" if big else "in-memory"
    return mode


def fits_out_of_core(fit: str, model: str | Callable[[float], Any], n_train: int,
                     d: int) -> bool:
    """Whether ``fit`` fits ``model`` out of core (:func:`fit_route`)."""
    return fit_route(fit, model, n_train, d) == "out-of-core"


def _fit_chunked(route: str, fit: str, z: np.ndarray, labels: np.ndarray,
                 tags: tuple[np.ndarray, ...], mean: np.ndarray, scale: float,
                 grid: tuple[float, ...]) -> FittedDownstream:
    """The logistic model fitted a chunk at a time, as a :class:`FittedDownstream`: out of core
    (:func:`common.out_of_core.fit_out_of_core`, the chunks' order drawn from a fixed seed, as
    every built-in model fixes its random state) or on the Dask scheduler ``fit`` names
    (:func:`common.dask_fit.fit_dask`; ``local`` without one)."""
    if route == "dask":
        from noisyanchor.common.dask_fit import LOCAL, dask_client, fit_dask

        with dask_client(fit.partition("@")[2] or LOCAL) as client:
            done = fit_dask(z, labels, tags, mean, scale, grid, client)
    else:
        from noisyanchor.common.out_of_core import fit_out_of_core

        done = fit_out_of_core(z, labels, tags, mean, scale, grid, np.random.default_rng(0))
    tr, _, te = tags
    utility = Utility(done.test, done.validation, done.c, int(tr.sum()), int(te.sum()),
                      converged=done.converged, fits_not_converged=done.fits_not_converged)
    return FittedDownstream(utility, done.estimator, mean, scale)


def held_out_metrics(labels: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """Balanced accuracy (mean recall over the classes present in ``labels``), accuracy and
    the row count of ``predicted`` against ``labels``; None for both without rows."""
    labels, predicted = np.asarray(labels), np.asarray(predicted)
    if not len(labels):
        return {"balanced_accuracy": None, "accuracy": None, "n_test": 0}
    balanced = _balanced_accuracy()(labels, predicted)
    return {"balanced_accuracy": balanced, "accuracy": float(np.mean(labels == predicted)),
            "n_test": len(labels)}


def evaluate_utility(
    z: np.ndarray, labels: np.ndarray, tags: np.ndarray, *,
    model: str | Callable[[float], Any] = "logistic", participants: np.ndarray | None = None,
) -> Utility:
    """Held-out metrics of :func:`fit_downstream` (train on TRAIN rows, select ``C`` on
    VALIDATION rows if any, score on TEST rows).

    Parameters
    ----------
    z : (n, d) ndarray
        Collaboration matrix ``Z``.
    labels : (n,) ndarray
    tags : (n,) ndarray of {0: train, 1: validation, 2: test}
    model : str or callable
        A name from :data:`MODELS` or ``c -> unfitted estimator`` (searched over
        :data:`C_GRID`).
    participants : (n,) ndarray of int, optional
        Participant index of every row; adds ``participant_only_balanced_accuracy``.
    """
    fitted = fit_downstream(z, labels, tags, model=model)
    if participants is None:
        return fitted.utility
    return with_participant_only(fitted.utility, labels, tags, participants, model=model)


def with_participant_only(utility: Utility, labels: np.ndarray, tags: np.ndarray,
                          participants: np.ndarray, *,
                          model: str | Callable[[float], Any]) -> Utility:
    """``utility`` (of a fitted :func:`fit_downstream`) with its
    ``participant_only_balanced_accuracy``: the one cheap extra fit, on the one-hot participant
    index at the chosen ``c``; the model on ``Z`` is not fitted again."""
    participant_only = participant_only_accuracy(labels, tags, participants, model=model,
                                                 c=utility.c)
    return replace(utility, participant_only_balanced_accuracy=participant_only)


def participant_only_accuracy(labels: np.ndarray, tags: np.ndarray, participants: np.ndarray,
                              *, model: str | Callable[[float], Any], c: float) -> float:
    """Test balanced accuracy of ``model`` (hyper-parameter ``c``) trained on the one-hot
    participant index of each row alone (:class:`Utility`).

    The logistic model is fitted on the distinct (participant, label) rows of the training
    rows weighted by their counts: scikit-learn's objective (the weighted mean loss, the penalty
    over the summed weights) is then the one on every row, in ``p K`` rows instead of ``n``
    (one-hot rows of 5 million records took 0.4 GiB, more than an analyst under a memory
    limit had). Its labels are its predictions for each participant; the counts and the score
    are taken a chunk of rows at a time (:func:`_participant_only_logistic`).
    """
    labels, tags = np.asarray(labels), np.asarray(tags)
    participants = np.asarray(participants)
    if participants.shape != labels.shape:
        raise InvalidInputError(f"participants must give one index per row ({len(labels)}), "
                                f"got shape {participants.shape}")
    estimator, _ = _model_and_grid(model)
    if model in OUT_OF_CORE_MODELS:
        return _participant_only_logistic(labels, tags, participants, estimator, c)
    tr, te = (tags == TRAIN), (tags == TEST)
    ids, index = np.unique(participants, return_inverse=True)
    onehot = np.eye(len(ids))
    predicted = _fit_predict(onehot[index[tr]], labels[tr], onehot[index[te]], c, estimator)
    return float(_balanced_accuracy()(labels[te], predicted))


def _participant_only_logistic(labels: np.ndarray, tags: np.ndarray, participants: np.ndarray,
                               estimator: Callable[[float], Any], c: float) -> float:
    """:func:`participant_only_accuracy` of the logistic model: the ``(p, K)`` counts of
    training rows per participant and label, then the confusion counts of the test rows, each
    a chunk of rows at a time, so that no ``n``-long temporary is made."""
    from noisyanchor.common.out_of_core import balanced_accuracy_counts

    def distinct(values: np.ndarray, flags: np.ndarray | None = None) -> np.ndarray:
        found = [np.unique(values[rows] if flags is None else values[rows][flags[rows]])
                 for rows in row_chunks(len(values))]
        return np.unique(np.concatenate(found)) if found else np.empty(0, values.dtype)

    tr, te = (tags == TRAIN), (tags == TEST)
    ids, classes = distinct(participants), distinct(labels, tr)
    counts = np.zeros(len(ids) * len(classes), dtype=np.int64)
    for rows in row_chunks(len(labels)):
        flags = tr[rows]
        counts += np.bincount(np.searchsorted(ids, participants[rows][flags]) * len(classes)
                              + np.searchsorted(classes, labels[rows][flags]),
                              minlength=len(counts))
    pairs = np.flatnonzero(counts)
    rows_of_pairs, label = np.divmod(pairs, len(classes))
    onehot = np.eye(len(ids))
    fitted, _ = fit_model(estimator, c, onehot[rows_of_pairs], classes[label], counts[pairs])
    per_participant = fitted.predict(onehot)
    every = distinct(labels, te)
    correct, total = np.zeros(len(every)), np.zeros(len(every))
    for rows in row_chunks(len(labels)):
        truth = labels[rows][te[rows]]
        guess = per_participant[np.searchsorted(ids, participants[rows][te[rows]])]
        k = np.searchsorted(every, truth)
        total += np.bincount(k, minlength=len(every))
        correct += np.bincount(k[guess == truth], minlength=len(every))
    return balanced_accuracy_counts(correct, total)
