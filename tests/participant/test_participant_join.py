"""What a site checks when it joins, without a network: the preprocessing its kit agreed to,
the schema kept for later uses of its records, and the withdrawal text the others read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from noisyanchor import deploy
from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.protocol_messages import FederationInfo
from noisyanchor.common.schema import RecordSchema
from noisyanchor.common.tabular import NumericColumn, TableError, TabularSchema
from noisyanchor.common.wire_messages import PROTO_CODEC, federation_info_of, tabular_message
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.core.join import keep_schema as keep
from noisyanchor.participant.core.join import served_schema
from noisyanchor.participant.run import (
    kept_schema,
    local_data,
    read_before_connecting,
    withdrawal_reason,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb

TEMPLATE = Path(deploy.__file__).parent / "templates" / "participant.toml"
TABULAR = TabularSchema((NumericColumn("area", min=0.0, max=1000.0),
                         NumericColumn("ratio", center=0.5, scale=0.25)))


@pytest.fixture
def cfg(tmp_path):
    write_pki(tmp_path / "pki", ["org-a"])
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "org-a.csv").write_text("ratio,area,label\n0.75,500,1\n0.25,250,0\n")
    (tmp_path / "site.toml").write_text(TEMPLATE.read_text())
    return load_participant_config(tmp_path / "site.toml")


def _info(schema: TabularSchema | None) -> FederationInfo:
    """The declaration as a site reads it from the wire (``Describe``)."""
    info = pb.FederationInfo(federation_id="pilot-2026", participants=["org-a", "org-b"])
    if schema is not None:
        info.schema.CopyFrom(tabular_message(schema))
    return federation_info_of(info)


def keep_schema(cfg, info: FederationInfo) -> None:
    """Kept as ``participant upload`` keeps it (the protobuf encoding)."""
    keep(cfg, info, PROTO_CODEC)


def test_a_kit_pinned_to_another_preprocessing_refuses_the_analysts(cfg):
    pinned = dataclasses.replace(cfg, preprocessing_sha256=TABULAR.digest().hex())
    assert served_schema(pinned, _info(TABULAR)).tabular == TABULAR
    other = TabularSchema((NumericColumn("area", min=0.0, max=2000.0), TABULAR.columns[1]))
    with pytest.raises(InvalidInputError, match="other than the one org-a's config agreed to"):
        served_schema(pinned, _info(other))
    with pytest.raises(InvalidInputError, match=r"digest none\)"):
        served_schema(pinned, _info(None))
    assert served_schema(cfg, _info(other)).tabular == other  # no pin: the analyst's


def test_the_kept_schema_preprocesses_later_uses_as_the_upload_did(cfg):
    assert kept_schema(cfg) is None
    np.testing.assert_array_equal(local_data(cfg).x, [[0.75, 500.0], [0.25, 250.0]])
    keep_schema(cfg, _info(TABULAR))
    assert kept_schema(cfg) == RecordSchema.typed(TABULAR)
    np.testing.assert_array_equal(local_data(cfg).x, [[0.5, 1.0], [0.25, -1.0]])
    (cfg.data.parent / "new.csv").write_text("area,ratio\n1000,0.5\n")  # next week's
    new = local_data(dataclasses.replace(cfg, data=cfg.data.parent / "new.csv"),
                     require_labels=False)
    assert new.labels is None
    np.testing.assert_array_equal(new.x, [[1.0, 0.0]])
    keep_schema(cfg, _info(None))  # the federation now declares none: nothing stale is kept
    assert kept_schema(cfg) is None


def test_a_kept_schema_edited_after_it_was_kept_is_refused(cfg):
    """Issue 30, item 4: the kept schema is compared with the digest the kit pins, as the
    analyst's copy is; an edit consistent with itself is still refused."""
    from noisyanchor.common.errors import IntegrityError
    from noisyanchor.participant.run import schema_path

    pinned = dataclasses.replace(cfg, preprocessing_sha256=TABULAR.digest().hex())
    keep_schema(pinned, _info(TABULAR))
    assert kept_schema(pinned) == RecordSchema.typed(TABULAR)
    other = TabularSchema((NumericColumn("area", min=0.0, max=2000.0), TABULAR.columns[1]))
    schema_path(pinned).write_bytes(tabular_message(other).SerializeToString())
    with pytest.raises(IntegrityError, match="changed after it was kept"):
        kept_schema(pinned)
    schema_path(pinned).write_bytes(b"\xff\xff\xff")
    with pytest.raises(InvalidInputError, match="is not a kept schema"):
        kept_schema(pinned)


def test_the_withdrawal_names_line_and_column_but_no_value_and_no_local_path(cfg):
    err = TableError(str(cfg.data), "{value} is not a number", line=7, column="area",
                     value="12O")
    reason = withdrawal_reason(cfg, err)
    assert reason == "org-a.csv, line 7, column 'area': the value is not a number"
    config_error = InvalidInputError(f"org-a's data {cfg.data} and key {cfg.tls.key}\n\x1b[31m")
    text = withdrawal_reason(cfg, config_error)
    assert str(cfg.data.parent) not in text and "org-a.csv" in text and "org-a.key" in text
    assert "\x1b" not in text and "\n" not in text


def _kit_with_schema(cfg, schema_toml: str, pin: str | None = None) -> Path:
    path = cfg.data.parent.parent / "kit.toml"
    text = TEMPLATE.read_text()
    if pin is not None:
        text = text.replace('# preprocessing_sha256 = "66a8..."',
                            f'preprocessing_sha256 = "{pin}"')
    path.write_text(text + schema_toml)
    return path


KIT_SCHEMA = """
[schema]
[[schema.column]]
name = "area"
min = 0.0
max = 1000.0
[[schema.column]]
name = "ratio"
center = 0.5
scale = 0.25
"""


def test_a_kit_carries_the_typed_schema_its_digest_pins(cfg):
    kit = load_participant_config(_kit_with_schema(cfg, KIT_SCHEMA))
    assert kit.schema == TABULAR and kit.preprocessing_sha256 == TABULAR.digest().hex()
    pinned = load_participant_config(_kit_with_schema(cfg, KIT_SCHEMA, TABULAR.digest().hex()))
    assert pinned.schema == TABULAR
    with pytest.raises(ConfigError, match="the kit was edited"):
        load_participant_config(_kit_with_schema(cfg, KIT_SCHEMA.replace("1000.0", "999.0"),
                                                 TABULAR.digest().hex()))
    with pytest.raises(ConfigError, match=r"holds the federation's typed columns"):
        load_participant_config(_kit_with_schema(cfg, "[schema]\nfeatures = 2\n"))


def test_a_kit_may_read_decimal_commas_with_another_delimiter(cfg):
    """Issue 34: a decimal-comma export is read as it is; the one mark both cannot be is named
    with its key."""
    kit = _kit_with_schema(cfg, KIT_SCHEMA)
    text = kit.read_text()
    kit.write_text(text.replace("[participant]\n", '[participant]\ndelimiter = ";"\n'
                                'decimal = ","\n', 1))
    assert load_participant_config(kit).decimal == ","
    kit.write_text(text.replace("[participant]\n", '[participant]\ndecimal = ","\n', 1))
    with pytest.raises(ConfigError, match=r"\[participant\] decimal: .*cannot also be the "
                                          "delimiter"):
        load_participant_config(kit)


def test_a_bad_cell_is_named_before_connecting_even_with_no_analyst(cfg):
    kit = dataclasses.replace(load_participant_config(_kit_with_schema(cfg, KIT_SCHEMA)),
                              analyst="127.0.0.1:9", timeout=0.5)  # nothing listens
    np.testing.assert_array_equal(read_before_connecting(kit).x, [[0.5, 1.0], [0.25, -1.0]])
    kit.data.write_text("ratio,area,label\n0.75,500,1\n0.25,abc,0\n")
    with pytest.raises(TableError, match=r"org-a.csv, line 3, column 'area': 'abc' is not a "
                       "number"):
        read_before_connecting(kit)  # the withdrawal could not be sent: logged, not raised
    assert read_before_connecting(cfg) is None  # a kit without the schema reads once joined


def test_a_symlink_in_the_state_folder_pointing_outside_is_refused_at_every_command(cfg):
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / "site-model.bin").symlink_to(cfg.tls.key)  # would read the TLS key
    with pytest.raises(InvalidInputError, match=r"symlink.*site-model\.bin"):
        load_participant_config(cfg.tls.key.parent.parent / "site.toml")
    with pytest.raises(InvalidInputError, match="symlink"):  # and each reader on its own
        cfg.read_state(cfg.state_dir / "site-model.bin")


def test_nan_in_the_kept_secrets_is_refused_naming_the_file_and_array(cfg):
    from noisyanchor.participant.release_client import load_key
    from noisyanchor.participant.run import SECRETS_FILE

    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    np.savez(cfg.state_dir / SECRETS_FILE, rotation=np.eye(2),
             translation=np.array([0.0, np.nan]))
    with pytest.raises(InvalidInputError, match=r"secrets\.npz: array 'translation' holds NaN"):
        load_key(cfg)
