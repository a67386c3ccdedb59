"""The downstream logistic model fitted on a Dask cluster, for analysts who already run one: the
objective of scikit-learn's ``LogisticRegression`` (lbfgs) minimised by scipy's L-BFGS, its loss
and gradient summed over chunks of the training rows of ``Z`` held by the cluster's workers.

The training rows are standardised a chunk at a time as :mod:`common.out_of_core` reads them
(``u = (z - mu) / s``), and each chunk is sent to the cluster once (``Client.scatter``); every
evaluation of the objective is then one task per chunk, which returns the chunk's loss and
gradient at the current coefficients (a few hundred numbers, sent with the task), summed here.
The analyst holds one chunk at a time; the cluster holds the training rows in its workers'
memory. Validation and test rows are scored here, a chunk at a time
(:func:`common.out_of_core.chunked_score`).

The objective is scikit-learn's, so the model is the in-memory fit's up to the solvers'
tolerances: ``mean_k loss_k + ||W||^2 / (2 C n)`` over the ``n`` training rows, the intercept
unpenalised; the binary log loss on one coefficient row for two classes, the multinomial one
(softmax over a row per class) above. The result is a fitted ``LogisticRegression`` (its
``coef_``, ``intercept_`` and ``classes_`` set), exported as any in-memory fit.

dask-ml is not used: its ``LogisticRegression`` (dask-glm) penalises the intercept, scales the
penalty differently and fits one-vs-rest for many classes, so its model is not this one; and
the package follows dask's releases slowly.

``[model] scheduler`` (:func:`check_scheduler`): ``local``, a ``LocalCluster`` of one worker
process per CPU started for the fit and stopped after it, or the address of a running
scheduler (``tcp://HOST:8786``), whose workers must have this package installed.

References: issue 31 (a fit that scales: on a cluster the fit through Dask).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from noisyanchor.common.chunks import CHUNK_ROWS, row_chunks
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.out_of_core import (
    OutOfCoreFit,
    chosen,
    searched,
    standardised_chunk,
)

#: Rows of one task: 16 of :data:`common.chunks.CHUNK_ROWS` (128 MiB of float64 at d = 128),
#: so that a task's work outweighs the scheduler's millisecond per task.
TASK_ROWS = 16 * CHUNK_ROWS
#: L-BFGS stops once the largest entry of the projected gradient of the mean objective is
#: below this (scikit-learn's ``tol`` is 1e-4): closer to the optimum than the in-memory fit.
GRADIENT_TOLERANCE = 1e-8
#: Iterations at most, as the in-memory fit's ``max_iter``.
MAX_ITER = 2000
#: The scheduler that starts a cluster on this machine for the fit.
LOCAL = "local"


def check_scheduler(value: str) -> str:
    """``value`` if it is ``local`` or a scheduler address (``SCHEME://HOST[:PORT]``).

    Raises
    ------
    InvalidInputError
        Anything else.
    """
    scheme, sep, rest = value.partition("://")
    if value == LOCAL or (sep and scheme.isalnum() and rest and " " not in rest):
        return value
    raise InvalidInputError(f"scheduler must be {LOCAL!r} or a Dask scheduler address such as "
                            f"tcp://HOST:8786, not {value!r}")


@contextmanager
def dask_client(scheduler: str) -> Iterator[Any]:
    """A ``distributed.Client`` of ``scheduler`` (:func:`check_scheduler`), closed after the
    block (with the cluster it started for ``local``)."""
    try:
        import distributed
    except ImportError as err:  # the optional extra
        raise InvalidInputError("[model] fit = \"dask\" needs dask.distributed: pip install "
                                "'noisyanchor[cluster]'") from err
    if check_scheduler(scheduler) == LOCAL:
        with distributed.LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            yield client
    else:
        with distributed.Client(scheduler) as client:
            yield client


def chunk_objective(u: np.ndarray, y: np.ndarray, theta: np.ndarray,
                    k: int) -> tuple[float, np.ndarray]:
    """The summed log loss of one chunk and its gradient in ``theta`` (a task on a worker).

    Parameters
    ----------
    u : (m, d) ndarray
        Standardised training rows.
    y : (m,) ndarray of int
        Their class indices, ``0..K-1``.
    theta : (k (d + 1),) ndarray
        ``[W | w0]`` row by row: ``k`` rows of ``d`` coefficients and an intercept.
    k : int
        Coefficient rows: 1 for two classes (binary log loss), ``K`` above (multinomial).
    """
    wb = theta.reshape(k, -1)
    logits = u @ wb[:, :-1].T + wb[:, -1]
    if k == 1:  # binary: loss log(1 + exp(-t a)), t = +-1
        a = logits[:, 0]
        sign = 2.0 * y - 1.0
        loss = float(np.logaddexp(0.0, -sign * a).sum())
        residual = (0.5 * (1.0 + np.tanh(0.5 * a)) - y)[:, None]  # sigmoid(a) - y
    else:
        top = logits.max(axis=1, keepdims=True)
        shifted = np.exp(logits - top)
        total = shifted.sum(axis=1, keepdims=True)
        loss = float((np.log(total[:, 0]) + top[:, 0] - logits[np.arange(len(y)), y]).sum())
        residual = shifted / total
        residual[np.arange(len(y)), y] -= 1.0
    grad = np.hstack([residual.T @ u, residual.sum(axis=0)[:, None]])
    return loss, grad.ravel()


def minimise(objective: Callable[[np.ndarray], tuple[float, np.ndarray]], size: int,
             ) -> tuple[np.ndarray, bool]:
    """``theta`` minimising ``objective`` (value and gradient) from zero by scipy's L-BFGS,
    and whether it met :data:`GRADIENT_TOLERANCE` within :data:`MAX_ITER` iterations."""
    from scipy.optimize import minimize

    done = minimize(objective, np.zeros(size), jac=True, method="L-BFGS-B",
                    options={"maxiter": MAX_ITER, "gtol": GRADIENT_TOLERANCE, "ftol": 0.0})
    return done.x, bool(done.success)


def fit_dask(z: np.ndarray, labels: np.ndarray, tags: tuple[np.ndarray, ...],
             mean: np.ndarray, scale: float, grid: tuple[float, ...],
             client: Any) -> OutOfCoreFit:
    """One logistic model per ``C`` of ``grid`` on the training rows of ``z``, its objective's
    chunks evaluated as tasks of ``client``; the best on validation (the middle of the grid
    without validation rows), scored on the test rows.

    ``z`` (``Z``, a memory map never copied whole), ``labels``, ``tags`` (the training,
    validation and test rows), ``mean`` (``mu``), ``scale`` (``s``) and ``grid`` are
    :func:`common.out_of_core.fit_out_of_core`'s; ``client`` is a ``distributed.Client``.
    """
    from sklearn.linear_model import LogisticRegression

    tr, va, _ = tags
    classes = np.unique(labels[tr])
    k = 1 if len(classes) == 2 else len(classes)
    n_train, d = int(tr.sum()), z.shape[1]
    chunks = []
    for rows in row_chunks(len(z), TASK_ROWS):
        if tr[rows].any():
            y = np.searchsorted(classes, labels[rows][tr[rows]])
            chunks.append((client.scatter(standardised_chunk(z, rows, tr, mean, scale)),
                           client.scatter(y)))
    values = searched(grid, va)
    models, converged = [], []
    try:
        for c in values:
            def objective(theta: np.ndarray, c: float = c) -> tuple[float, np.ndarray]:
                parts = client.gather([client.submit(chunk_objective, u, y, theta, k, pure=False)
                                       for u, y in chunks])
                w = theta.reshape(k, d + 1).copy()
                w[:, -1] = 0.0  # the intercept is not penalised
                loss = sum(p[0] for p in parts) / n_train + float(w.ravel() @ w.ravel()) / (
                    2.0 * c * n_train)
                grad = sum(p[1] for p in parts) / n_train + w.ravel() / (c * n_train)
                return loss, grad

            theta, ok = minimise(objective, k * (d + 1))
            model = LogisticRegression(C=c)
            wb = theta.reshape(k, d + 1)
            model.classes_, model.coef_, model.intercept_ = classes, wb[:, :-1], wb[:, -1]
            model.n_features_in_ = d
            models.append(model)
            converged.append(ok)
    finally:
        client.cancel([f for pair in chunks for f in pair])
    return chosen(models, values, converged, z, labels, tags, mean, scale)
