"""The site's one upload and its site-model request, free of any transport (issue 32): the
upload computed in steps (:func:`plan_upload`, :func:`compute_site_upload`, with the anchor
agreement between them), the statements it signs with its kit key, and the check of the
analyst's answer.

The site signs its receipt (:func:`common.bundles.receipt`: its id and the header with every
array's SHA-256), so the analyst's core can check the upload against the federation CA whatever
carried it; and it computes that receipt itself, so an analyst's receipt for other bytes, or for
another site, is refused here (:func:`checked_receipt`). A transport streams the bundle (gRPC:
:meth:`participant.client.AnalystClient.send_bundle`).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.bundles import BundleSpec, HeaderCodec, bundle_spec, receipt
from noisyanchor.common.errors import IntegrityError, InvalidInputError, PreconditionError
from noisyanchor.common.files import atomic_write, private_dir
from noisyanchor.common.gdp import anchor_from_seed, secret_rng
from noisyanchor.common.methods import SecretState
from noisyanchor.common.models import SiteModel
from noisyanchor.common.signed_statements import bundle_statement, sign, site_model_statement
from noisyanchor.common.splits import split_tags
from noisyanchor.participant.compute import compute_upload
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.core.agreement import SharedParameters
from noisyanchor.participant.core.join import Joined, public_projection
from noisyanchor.participant.data import LocalData
from noisyanchor.participant.projection_cost import projection_cost
from noisyanchor.participant.site_state import (
    SiteKey,
    UploadSeeds,
    records_digest,
    upload_seeds,
)

log = logging.getLogger(__name__)

#: File (in ``state_dir``) of the secrets a colluder keeps.
SECRETS_FILE = "secrets.npz"


def site_seeds(cfg: ParticipantConfig) -> UploadSeeds | None:
    """The seeds of this site's upload: None with an experiment's seed (every run identical),
    else kept until the upload commits, so an interrupted run repeats the same upload."""
    return None if cfg.seed is not None else upload_seeds(cfg)


def upload_tags(cfg: ParticipantConfig, data: LocalData, seeds: UploadSeeds | None
                ) -> np.ndarray:
    """The split tags sent with the upload (``n_i``): the table's own, else a stratified 20%
    test split."""
    # Tags are not secret; the split is drawn from a generator separate from the secret one
    # (so keys do not depend on it), and kept with the key: the site's gain is measured on the
    # same test rows.
    if data.tags is not None:
        return data.tags
    rng = np.random.default_rng([cfg.seed, 1] if seeds is None else seeds.split)
    return split_tags(data.labels, rng).astype("|i1")


def measured_projection_cost(cfg: ParticipantConfig, joined: Joined, tags: np.ndarray
                             ) -> float | None:
    """What the public projection ``F`` costs this site's own model, measured on its own rows
    (:mod:`participant.projection_cost`) and said in its log, a warning when the cost exceeds
    the noise of the measurement; the number to send with the upload when the federation asks
    for it (``[federation] report_projection_cost``), else None. Nothing without ``F``."""
    data, info = joined.data, joined.info
    f = public_projection(cfg, data.x.shape[1])
    if f is None or data.labels is None:
        return None
    model = info.model if info.model is not None and info.model != "none" else "logistic"
    try:
        # Fixed folds: nothing secret in them, and a repeated upload sends the same number.
        measured = projection_cost(data.x, data.labels, tags, f, model=model,
                                   rng=np.random.default_rng(0))
    except InvalidInputError as err:
        log.info("%s: what the projection F costs its own model was not measured: %s", cfg.id,
                 err)
        return None
    if measured.exceeds_noise:
        log.warning("%s: %s: more than the noise of the measurement; the operator can leave "
                    "[federation] dim out", cfg.id, measured.text())
    else:
        log.info("%s: %s", cfg.id, measured.text())
    if not info.report_projection_cost:
        return None
    log.info("%s: the federation asks for this one number: it is sent with the upload", cfg.id)
    return measured.cost


@dataclass(frozen=True)
class UploadPlan:
    """What a site's upload is made from, before the anchor agreement.

    Attributes
    ----------
    cfg : ParticipantConfig
    joined : Joined
        The declaration, the records and ``X_i F`` (``n_i x d``).
    rng : numpy.random.Generator
        The secret generator the key ``(O_i, Psi_i)`` and the noise ``W_i`` are drawn from.
    tags : (n_i,) ndarray
        The split tags sent with the upload.
    cost : float or None
        The projection's cost sent with the upload (:func:`measured_projection_cost`).
    """

    cfg: ParticipantConfig
    joined: Joined
    rng: np.random.Generator
    tags: np.ndarray
    cost: float | None

    @property
    def d(self) -> int:
        """The working width ``d``."""
        return self.joined.x.shape[1]

    @property
    def anchors(self) -> int:
        """``r`` (``4 d`` unless the config sets it)."""
        return self.params.anchors

    @property
    def params(self) -> SharedParameters:
        """What the anchor agreement binds the seed to (:func:`shared_parameters`)."""
        return shared_parameters(self.cfg, self.d)


def shared_parameters(cfg: ParticipantConfig, d: int) -> SharedParameters:
    """What the anchor agreement binds the seed to for records of width ``d``: the method,
    ``r`` (``4 d`` unless the config sets it), ``d`` and the translation scale ``s``."""
    return SharedParameters(cfg.method, cfg.anchors or 4 * d, d, cfg.translation_scale)


def plan_upload(cfg: ParticipantConfig, joined: Joined, seeds: UploadSeeds | None
                ) -> UploadPlan:
    """The plan of this site's upload from its records ``joined`` and its seeds
    (:func:`site_seeds`)."""
    rng = secret_rng(cfg.seed if seeds is None else seeds.secret)
    tags = upload_tags(cfg, joined.data, seeds)
    return UploadPlan(cfg, joined, rng, tags, measured_projection_cost(cfg, joined, tags))


@dataclass(frozen=True)
class SiteUpload:
    """A computed upload: the arrays sent, their bundle spec (without digests), the key kept
    once it commits and the secret state.

    Attributes
    ----------
    arrays : dict of str to ndarray
        ``data`` (``Y_i``), ``anchor`` (``B_i``, methods with an anchor), ``labels``, ``tags``.
    spec : BundleSpec
    key : SiteKey
        ``F``, ``(O_i, Psi_i)`` and the split: kept once the analyst committed the upload.
    state : SecretState
    seed : bytes or None
        The agreed anchor seed.
    records : int
        ``n_i``.
    """

    arrays: dict[str, np.ndarray]
    spec: BundleSpec
    key: SiteKey
    state: SecretState
    seed: bytes | None
    records: int


def compute_site_upload(plan: UploadPlan, seed: bytes | None) -> SiteUpload:
    """This site's upload computed from ``plan`` and the agreed anchor ``seed`` (None: I-GDP)."""
    cfg, data, x = plan.cfg, plan.joined.data, plan.joined.x
    made, state = compute_upload(cfg.method, x, plan.rng, shared_seed=seed,
                                 anchors=plan.anchors, sigma=cfg.sigma, v=cfg.v,
                                 translation_scale=cfg.translation_scale)
    arrays = {"data": made.data}
    if made.anchor is not None:
        arrays["anchor"] = made.anchor
    arrays |= {"labels": data.labels.astype("<i8"), "tags": plan.tags.astype("|i1")}
    spec = bundle_spec(cfg.federation_id, cfg.method, arrays, digests=False,
                       preprocessing_sha256=plan.joined.preprocessing_sha256,
                       projection_cost=plan.cost)
    key = SiteKey(cfg.federation_id, cfg.id, cfg.method, state.key,
                  public_projection(cfg, data.x.shape[1]), data.x.shape[1], plan.tags,
                  records_digest(data.x, data.labels), data.feature_names)
    return SiteUpload(arrays, spec, key, state, seed, len(x))


def keep_secrets(plan: UploadPlan, upload: SiteUpload) -> Path:
    """Keep, mode 0600 in the state folder (:data:`SECRETS_FILE`), what a colluder discloses:
    ``O_i``, ``Psi_i``, the anchor ``A`` and the noise drawn. They never leave this machine
    unless the colluder says so (``participant collude``)."""
    cfg, state = plan.cfg, upload.state
    kept = {"rotation": state.key.rotation, "translation": state.key.translation}
    if cfg.method_enum.uses_anchor:
        kept["anchor"] = anchor_from_seed(upload.seed, plan.anchors, plan.d)
    for name in ("data_noise", "anchor_noise"):
        if getattr(state, name) is not None:
            kept[name] = getattr(state, name)
    private_dir(cfg.state_dir)
    path = cfg.state_dir / SECRETS_FILE
    buf = io.BytesIO()
    np.savez(buf, **kept)
    atomic_write(path, buf.getvalue())
    return path


@dataclass(frozen=True)
class SiteSigner:
    """A site's statements about its bundles and requests, signed with its kit key.

    Attributes
    ----------
    federation_id, participant_id : str
    tls_key_pem : bytes
        The kit key (the private key of the site's TLS client certificate).
    codec : HeaderCodec
        The encoding of a bundle header its receipts hash (the analyst store's:
        :data:`common.wire.PROTO_HEADERS`).
    """

    federation_id: str
    participant_id: str
    tls_key_pem: bytes
    codec: HeaderCodec

    def receipt(self, spec: BundleSpec) -> bytes:
        """The receipt of this site's bundle ``spec`` (with every digest)."""
        return receipt(spec, self.participant_id, self.codec.header_bytes)

    def bundle_signature(self, kind: str, spec: BundleSpec) -> bytes:
        """The signature of this site's ``kind`` bundle ``spec`` (``upload``, ``disclosure``)."""
        return sign(self.tls_key_pem, bundle_statement(self.federation_id, self.participant_id,
                                                       kind, self.receipt(spec)))

    def site_model_signature(self, asked: str) -> bytes:
        """The signature of this site's request for the site model of ``asked`` (its own;
        empty: its own)."""
        return sign(self.tls_key_pem, site_model_statement(self.federation_id,
                                                           self.participant_id, asked))

    def checked_receipt(self, kind: str, spec: BundleSpec, answered: bytes) -> bytes:
        """``answered``, the analyst's receipt for this site's ``kind`` bundle ``spec``, once it
        is the one this site computes.

        Raises
        ------
        IntegrityError
            The analyst's receipt is for other bytes or another site (naming both digests).
        """
        own = self.receipt(spec)
        if answered != own:
            raise IntegrityError(f"the analyst's receipt {answered.hex()[:16]}... for the "
                                 f"{kind} of {self.participant_id!r} is not the one this site "
                                 f"computes ({own.hex()[:16]}...): it did not commit these "
                                 "bytes as this site's")
        return answered


def own_site_model(cfg: ParticipantConfig, site: SiteModel, where: str) -> SiteModel:
    """``site``, a site model read from ``where`` (a file, an analyst's answer), once it is
    this site's in its federation.

    Raises
    ------
    PreconditionError
        It is another site's or another federation's (naming both).
    """
    if (site.federation_id, site.participant) != (cfg.federation_id, cfg.id):
        raise PreconditionError(f"{where} is the site model of {site.participant!r} in "
                                f"federation {site.federation_id!r}, not of {cfg.id!r} in "
                                f"{cfg.federation_id!r}")
    return site
