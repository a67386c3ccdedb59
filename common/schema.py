"""The federation's declaration as both roles see it: the record schema every participant's data
must fit, and the method parameters a participant's own config must agree with.

The analyst declares them (its config's ``[schema]`` and ``[federation]`` tables) and serves them
(``Describe``); a participant compares them with its config and its data *before* the anchor
agreement and refuses locally with a message naming both sides, so a site whose data has 60
columns never joins a federation of 64 (issue 10, item 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.tabular.columns import MAX_ENCODED_WIDTH, check_count_limit
from noisyanchor.common.tabular.schema import TabularSchema

#: Value types a schema may declare, as numpy dtypes.
SCHEMA_DTYPES = {"float64": np.float64, "float32": np.float32, "int64": np.int64}


@dataclass(frozen=True)
class RecordSchema:
    """What one record is: ``features`` columns ``d_in`` of type ``dtype``, optionally named,
    optionally typed.

    Attributes
    ----------
    features : int
        ``d_in``, columns of ``X_i`` before the public projection ``F`` (SPEC.md section 1);
        with typed columns, their encoded width.
    dtype : str
        A key of :data:`SCHEMA_DTYPES`; ``int64`` requires integral values, ``float32`` values
        a float32 holds without overflow.
    feature_names : tuple of str
        Column names in order (empty: not declared); with typed columns the encoded names.
    tabular : TabularSchema or None
        Typed columns and their public preprocessing (issue 21; :meth:`typed` builds the rest
        from it); None: the plain ``features = N`` schema.
    """

    features: int
    dtype: str = "float64"
    feature_names: tuple[str, ...] = ()
    tabular: TabularSchema | None = None

    @classmethod
    def typed(cls, tabular: TabularSchema) -> RecordSchema:
        """The schema of typed columns: ``d_in`` and names are the encoded ones."""
        return cls(tabular.width, "float64", tabular.encoded_names, tabular)

    @property
    def preprocessing_sha256(self) -> bytes:
        """Digest of the declared preprocessing (empty: none declared, a plain schema)."""
        return self.tabular.digest() if self.tabular is not None else b""

    def __post_init__(self) -> None:
        if self.tabular is not None and (self.features != self.tabular.width
                                         or self.feature_names != self.tabular.encoded_names):
            raise InvalidInputError(f"typed columns encode to {self.tabular.width} features "
                                    f"named by them; the schema says {self.features}")
        if self.features < 1:
            raise InvalidInputError(f"a schema needs at least 1 feature, got {self.features}")
        check_count_limit(self.features, MAX_ENCODED_WIDTH,
                          f"the schema declares {self.features:,} features")
        if self.dtype not in SCHEMA_DTYPES:
            raise InvalidInputError(f"schema dtype must be one of {', '.join(SCHEMA_DTYPES)}, "
                                    f"got {self.dtype!r}")
        if self.feature_names and len(self.feature_names) != self.features:
            raise InvalidInputError(f"the schema names {len(self.feature_names)} features but "
                                    f"declares {self.features}")
        if len(set(self.feature_names)) != len(self.feature_names):
            raise InvalidInputError("the schema's feature names must be distinct")

    def describe(self) -> str:
        """``64 float64 features`` (and the first names, when declared); the typed columns'
        description when typed."""
        if self.tabular is not None:
            return self.tabular.describe()
        names = ""
        if self.feature_names:
            shown = ", ".join(self.feature_names[:4])
            names = f" ({shown}{', ...' if self.features > 4 else ''})"
        return f"{self.features} {self.dtype} features{names}"

    def check(self, x: np.ndarray, names: Sequence[str] | None, *, who: str,
              federation: str) -> None:
        """Refuse records ``x`` (``n x d_in``, as loaded) that do not fit, naming both sides.

        Parameters
        ----------
        x : (n, d_in) ndarray
        names : sequence of str or None
            The data's own column names (a CSV header, an npz's ``feature_names``), if any.
        who, federation : str
            Names used in the message (the participant's data file, the federation id).
        """
        ours = f"federation {federation!r} declares {self.describe()}"
        if x.ndim != 2 or x.shape[1] != self.features:
            got = x.shape[1] if x.ndim == 2 else f"shape {x.shape}"
            raise InvalidInputError(f"{who} has {got} feature columns but {ours}: fix the data "
                                    "or ask the analyst's operator which schema applies")
        if self.dtype == "int64" and not np.all(np.equal(np.mod(x, 1), 0)):
            raise InvalidInputError(f"{who} has non-integer values but {ours}")
        if self.dtype == "float32":
            big = float(np.max(np.abs(x))) if x.size else 0.0
            if big > float(np.finfo(np.float32).max):
                raise InvalidInputError(f"{who} has values up to {big:.3g}, beyond float32, but "
                                        f"{ours}")
        if self.feature_names and names is not None and tuple(names) != self.feature_names:
            differ = [f"column {j}: {a!r} vs {b!r}" for j, (a, b)
                      in enumerate(zip(names, self.feature_names, strict=False)) if a != b]
            raise InvalidInputError(f"{who} names its features differently from the federation "
                                    f"{federation!r} (data vs schema: "
                                    f"{'; '.join(differ[:3]) or 'different count'})")


def check_declared(declared: dict, own: dict, *, who: str, analyst: str) -> None:
    """Refuse when a value the analyst declares differs from this participant's own.

    ``declared`` and ``own`` map parameter names to values; a name missing or None on either
    side is not compared. The message names every differing parameter with both values.
    """
    differ = [f"{k} = {own[k]!r} in {who}, {declared[k]!r} at the analyst"
              for k in sorted(declared) if declared[k] is not None and own.get(k) is not None
              and not _same(own[k], declared[k])]
    if differ:
        raise InvalidInputError(f"this participant does not fit the federation {analyst} "
                                f"declares: {'; '.join(differ)}. Use the analyst's values (the "
                                "startup kit's config has them) or ask its operator")


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return bool(np.isclose(float(a), float(b), rtol=1e-12, atol=0.0))
    return a == b
