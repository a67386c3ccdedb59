"""A participant's configuration (``noisyanchor participant upload|collude --config FILE``).

See ``deploy/templates/participant.toml`` for every key with comments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.files import narrow_private, open_under, read_under, refuse_links
from noisyanchor.common.gdp import DEFAULT_TRANSLATION_SCALE
from noisyanchor.common.methods import Method, check_sigma, check_v
from noisyanchor.common.sealing import SEED_BYTES
from noisyanchor.common.tabular import TabularSchema
from noisyanchor.common.tabular.reader import check_decimal
from noisyanchor.common.tomlconfig import Table, TlsFiles, check_id, read_toml
from noisyanchor.common.validation import check_anchor_rows, check_positive

#: Seconds a participant waits for the analyst and its peers when neither its ``timeout`` nor
#: the federation's deadline sets a limit (and to reach the analyst before learning the latter).
DEFAULT_WAIT = 3600.0


@dataclass(frozen=True)
class ParticipantConfig:
    """Everything one participant needs, validated once at start-up.

    Attributes
    ----------
    id : str
        Own participant id; must be the id ``tls.cert`` names (:mod:`common.identity`).
    federation_id : str
    analyst : str
        ``host:port`` of the analyst.
    server_name : str
        Name the analyst's certificate is checked against.
    data : Path
        Local records: ``.npz`` (``x``, ``labels``, optional ``tags``), ``.csv`` with a header
        and a label column, or ``.npy`` (2-D, labels in column ``label_index``).
    label_column, tag_column : str
        CSV column names of the labels (unless the federation's schema names it) and
        (optional) split tags.
    delimiter : str
        Between the values of a CSV file (default ``,``).
    decimal : str
        The decimal mark of a CSV file's numbers: ``.`` (default) or ``,`` (with another
        delimiter, as spreadsheets in many locales export ``3,5;12``).
    label_index : int
        Label column of a ``.npy`` file.
    state_dir : Path
        Where the anchor-agreement exchange key is kept until the upload commits (so a restart
        resumes the agreement), and the secrets when ``keep_secrets`` (the colluder role).
    keep_secrets : bool
    seed : int or None
        Seed of the participant's secret generator, for experiments only (default: OS entropy).
    timeout : float or None
        Seconds to wait for the analyst (restarts) and for the other participants; None: until
        the federation's deadline (the analyst's ``[federation] deadline``).
    method, anchors, dim, projection_seed, sigma, v, translation_scale
        The protocol: method, ``r`` (default ``4 d``), ``h`` of the public Gaussian projection
        ``F`` drawn from ``projection_seed`` (none when ``dim`` is unset), noise levels, ``s``.
    preprocessing_sha256 : str or None
        Hex digest of the preprocessing this site agreed to (``provision`` writes it from the
        project's typed ``[schema]``): the site refuses an analyst serving another one.
    schema : TabularSchema or None
        The kit's copy of the federation's typed ``[schema]`` (``provision`` writes it beside
        the digest, which it must match): the site reads and checks its table with it before
        connecting, so a bad cell is named at once (:func:`participant.run.run_upload`).
    dealer : str
        Participant who draws and seals the anchor seed.
    anchor_seed : bytes or None
        The dealer's seed, for reproducible experiments only (default: ``secrets.token_bytes``).
    tls : TlsFiles
    """

    id: str
    federation_id: str
    analyst: str
    server_name: str
    data: Path
    label_column: str
    tag_column: str
    label_index: int
    state_dir: Path
    keep_secrets: bool
    seed: int | None
    timeout: float | None
    method: str
    anchors: int | None
    dim: int | None
    projection_seed: int | None
    sigma: float
    v: float
    translation_scale: float
    dealer: str
    anchor_seed: bytes | None
    tls: TlsFiles
    delimiter: str = ","
    decimal: str = "."
    preprocessing_sha256: str | None = None
    schema: TabularSchema | None = None

    @property
    def method_enum(self) -> Method:
        """The method as an enum."""
        return Method(self.method)

    @property
    def wait_seconds(self) -> float:
        """``timeout``, or :data:`DEFAULT_WAIT` when it is not set."""
        return self.timeout if self.timeout is not None else DEFAULT_WAIT

    @property
    def needs_shared_seed(self) -> bool:
        """Every method but I-GDP derives something (anchor or common key) from the seed."""
        return self.method_enum.uses_anchor or self.method_enum.shared_key

    def read_state(self, path: Path, limit: int | None = None) -> bytes:
        """The bytes of ``path`` in the state folder (:func:`common.files.read_under`: no
        symlink followed, nothing outside the folder, at most ``limit`` bytes)."""
        return read_under(self.state_dir, path, limit)

    def open_state(self, path: Path) -> BinaryIO:
        """``path`` in the state folder opened for reading (:func:`common.files.open_under`)."""
        return open_under(self.state_dir, path)

    def with_overrides(self, **changes) -> ParticipantConfig:
        """A copy with command-line overrides (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def load_participant_config(path: Path) -> ParticipantConfig:
    """Read and validate a participant config file."""
    doc = read_toml(path)
    unknown = sorted(set(doc) - {"participant", "protocol", "tls", "schema"})
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}")
    part = Table(doc, "participant", path)
    proto = Table(doc, "protocol", path)
    method = proto.str("method", check=lambda m: Method.parse(m).value)
    pid = check_id(part.str("id"), f"{path}: [participant] id")
    dim = proto.int("dim", None, minimum=1)
    anchors = proto.int("anchors", None, minimum=2)
    if anchors is not None and dim is not None:
        proto.checked("anchors", anchors, lambda r: check_anchor_rows(r, dim, "anchors need"))
    projection_seed = proto.int("projection_seed", None, minimum=0)
    if dim is not None and projection_seed is None:
        raise proto.error("projection_seed", "is required with dim (the public projection F)")
    anchor_hex = proto.str("anchor_seed", None)
    anchor_seed = None
    if anchor_hex is not None:
        try:
            anchor_seed = bytes.fromhex(anchor_hex)
        except ValueError:
            raise proto.error("anchor_seed", "must be hexadecimal") from None
        if len(anchor_seed) != SEED_BYTES:
            raise proto.error("anchor_seed", f"must be {SEED_BYTES} bytes ({2 * SEED_BYTES} hex "
                                             "digits)")
    cfg = ParticipantConfig(
        id=pid,
        federation_id=check_id(part.str("federation_id"), f"{path}: [participant] federation_id"),
        analyst=part.str("analyst"), server_name=part.str("server_name", "localhost"),
        data=part.path("data"), label_column=part.str("label_column", "label"),
        tag_column=part.str("tag_column", "split"), label_index=part.int("label_index", -1),
        state_dir=part.path("state_dir", str(Path(path).parent / f"state-{pid}")),
        keep_secrets=part.bool("keep_secrets", False), seed=part.int("seed", None, minimum=0),
        timeout=part.seconds("timeout", None),
        method=method, anchors=anchors, dim=dim,
        projection_seed=projection_seed,
        sigma=proto.float("sigma", 0.0, check=lambda x: check_sigma(method, x)),
        v=proto.float("v", 0.0, check=lambda x: check_v(method, x)),
        translation_scale=proto.float("translation_scale", DEFAULT_TRANSLATION_SCALE,
                                      check=lambda x: check_positive(x, "translation_scale")),
        dealer=check_id(proto.str("dealer"), f"{path}: [protocol] dealer"),
        anchor_seed=anchor_seed, tls=TlsFiles.read(Table(doc, "tls", path)),
        delimiter=part.str("delimiter", ",", check=_delimiter),
        decimal=part.str("decimal", ".", check=lambda mark: check_decimal(
            mark, part.str("delimiter", ","))),
        preprocessing_sha256=proto.str("preprocessing_sha256", None, check=_sha256_hex))
    if anchor_seed is not None and cfg.dealer != pid:
        raise proto.error("anchor_seed", "only the dealer holds the anchor seed")
    if "schema" in doc:
        schema = _kit_schema(doc, path, cfg.preprocessing_sha256)
        cfg = replace(cfg, schema=schema,
                      preprocessing_sha256=cfg.preprocessing_sha256 or schema.digest().hex())
    part.done()
    proto.done()
    # Every command reads its kit: the state is checked each time.
    refuse_links(cfg.state_dir)
    narrow_private(cfg.state_dir)
    return cfg


def _kit_schema(doc: dict, path: Path, pinned: str | None) -> TabularSchema:
    """The kit's ``[schema]``: typed columns whose digest is the pinned one (if pinned)."""
    if not isinstance(doc["schema"], dict) or "column" not in doc["schema"]:
        raise ConfigError(f"{path}: [schema] in a site's config holds the federation's typed "
                          "columns ([[schema.column]] tables), as provision writes them")
    schema = TabularSchema.from_toml(doc["schema"], path)
    if pinned is not None and schema.digest().hex() != pinned:
        raise ConfigError(f"{path}: the [schema] digest {schema.digest().hex()[:16]}... is not "
                          f"[protocol] preprocessing_sha256 = {pinned[:16]}...: the kit was "
                          "edited; ask the operator for the current kit")
    return schema


def _delimiter(value: str) -> str:
    if len(value) != 1 or value in "\r\n\"":
        raise InvalidInputError(f"must be one character other than a quote or a line break, "
                                f"got {value!r}")
    return value


def _sha256_hex(value: str) -> str:
    try:
        ok = len(bytes.fromhex(value)) == 32
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInputError(f"must be a SHA-256 digest in hex (64 digits), got {value!r}")
    return value.lower()
