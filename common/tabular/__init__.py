"""Records as organisations hold them: typed columns, their public preprocessing and its digest,
and the streaming table reader whose errors name the file, line, column and value (issue 21).

* :mod:`.columns`: numeric, categorical and boolean columns, missing-value policies.
* :mod:`.schema`: :class:`TabularSchema` (TOML, wire, canonical digest).
* :mod:`.reader`: :func:`read_table`, CSV to the encoded ``X_i``.
* :mod:`.errors`: :class:`TableError` (a local message and a public one without the value).
* :mod:`.ranges`: numeric values outside their declared scaling (another unit? typos?).
"""

from noisyanchor.common.tabular.columns import (
    BooleanColumn,
    CategoricalColumn,
    CellError,
    Column,
    NumericColumn,
)
from noisyanchor.common.tabular.errors import TableError
from noisyanchor.common.tabular.reader import EncodedTable, read_table, read_table_chunks
from noisyanchor.common.tabular.schema import TabularSchema

__all__ = ["BooleanColumn", "CategoricalColumn", "CellError", "Column", "EncodedTable",
           "NumericColumn", "TableError", "TabularSchema", "read_table",
           "read_table_chunks"]
