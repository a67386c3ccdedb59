"""Analyst and participant config files: templates load, errors name the key."""

import sys
from pathlib import Path

import pytest

from noisyanchor import deploy
from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.common.errors import ConfigError
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.config import load_participant_config

TEMPLATES = Path(deploy.__file__).parent / "templates"


@pytest.fixture
def workdir(tmp_path):
    write_pki(tmp_path / "pki", ["org-a", "org-b", "org-c"])
    for name in ("analyst.toml", "participant.toml"):
        (tmp_path / name).write_text((TEMPLATES / name).read_text())
    return tmp_path


def test_templates_load_with_paths_relative_to_the_file(workdir):
    a = load_analyst_config(workdir / "analyst.toml")
    assert a.participants == ("org-a", "org-b", "org-c") and a.method == "aa-igdp-an"
    assert a.output_dir == (workdir / "store").resolve() and not a.accept_collusion
    assert a.stream_idle_timeout == 60.0 and a.precision == "auto"
    assert (a.stream_min_rate, a.stream_deadline, a.max_streams_per_caller) == (1024.0, 3600.0, 4)
    assert a.stopping == "objective" and a.blas_threads == 0 and a.gopp_method == "auto"
    p = load_participant_config(workdir / "participant.toml")
    assert p.id == "org-a" and p.dim is None and p.anchor_seed is None and p.seed is None
    assert p.tls.cert == (workdir / "pki" / "org-a.pem").resolve()


def test_every_transport_limit_is_a_key_and_reaches_grpc_with_port_sharing_off(workdir):
    """Issue 22, bounded transport: the template states every limit at its default, and the
    server hands each to gRPC core (SO_REUSEPORT off, so a second analyst cannot share the
    port)."""
    from noisyanchor.analyst import config as defaults
    from noisyanchor.analyst.server import max_concurrent_rpcs, transport_options

    a = load_analyst_config(workdir / "analyst.toml")
    assert (a.max_streams_per_connection, a.max_connections, a.handshake_timeout,
            a.connection_idle_timeout, a.max_queued_calls_per_caller, a.max_pending_calls) == (
        defaults.DEFAULT_MAX_STREAMS_PER_CONNECTION, defaults.DEFAULT_MAX_CONNECTIONS,
        defaults.DEFAULT_HANDSHAKE_TIMEOUT, defaults.DEFAULT_CONNECTION_IDLE_TIMEOUT,
        defaults.DEFAULT_MAX_QUEUED_CALLS_PER_CALLER, defaults.DEFAULT_MAX_PENDING_CALLS)
    text = (workdir / "analyst.toml").read_text()
    text = text.replace("max_streams_per_connection = 32", "max_streams_per_connection = 7")
    text = text.replace("handshake_timeout = 5.0", "handshake_timeout = 1.5")
    (workdir / "analyst.toml").write_text(text)
    options = dict(transport_options(load_analyst_config(workdir / "analyst.toml")))
    assert options["grpc.so_reuseport"] == 0
    assert options["grpc.max_concurrent_streams"] == 7
    assert options["grpc.http.overload_protection"] == 1
    assert options["grpc.server_handshake_timeout_ms"] == 1500
    assert options["grpc.max_allowed_incoming_connections"] == defaults.DEFAULT_MAX_CONNECTIONS
    # Raised to what every participant's connections and one address's can send at once, and
    # that is where gRPC starts dropping calls at random (its soft limit), not its hard limit.
    pending = max(a.max_pending_calls,
                  7 * (3 * a.max_connections_per_caller + a.max_connections_per_address))
    assert options["grpc.server.max_pending_requests"] == pending
    assert options["grpc.server.max_pending_requests_hard_limit"] == 2 * pending
    assert a.max_calls_per_caller == defaults.DEFAULT_MAX_CALLS_PER_CALLER
    assert max_concurrent_rpcs(a, 30) == 30 + 3 * a.max_calls_per_caller


@pytest.mark.parametrize("old, new, match", [
    ('method = "aa-igdp-an"', 'method = "gdp"', r"\[federation\] method: unknown method 'gdp'"),
    ("# anchors = 256 ", 'anchors = "64" ', r"\[federation\] anchors must be an integer"),
    ("# anchors = 256 ", "anchors = 10 ",
     r"\[federation\] anchors: anchors need \(\[schema\] features\) r >= d \+ 1"),
    ('reference = "org-a"', 'reference = "org-z"', r"\[federation\] reference"),
    ("tol = 1e-7", "tol = 1e-7\ntoll = 1", r"\[solver\] has unknown key\(s\) toll"),
    ('key = "pki/analyst.key"', 'key = "pki/missing.key"', r"\[tls\] key: file"),
    ('id = "pilot-2026"', 'id = "pilot/2026"', "must be 1-64 letters"),
    ('["org-a", "org-b", "org-c"]', '["org-a"]', "at least 2 distinct"),
    ('["org-a", "org-b", "org-c"]', '["org-a", "org-b", "Org-B"]', "are the same name"),
    ('precision = "auto"', 'precision = "half"', r"\[solver\] precision: precision must be one of"),
    ("blas_threads = 0", "blas_threads = -1", r"\[server\] blas_threads must be >= 0"),
    ("blas_threads = 0", "blas_threads = 1.5", r"\[server\] blas_threads must be an integer"),
    ('stopping = "objective"', 'stopping = "soon"',
     r"\[solver\] stopping: stopping must be one of objective, relative, absolute"),
    ('method = "auto"', 'method = "newton"', r"\[solver\] method: method must be one of auto, gpm"),
    ("stream_idle_timeout = 60.0", "stream_idle_timeout = 0.0",
     r"\[server\] stream_idle_timeout: .* seconds > 0"),
    ("stream_idle_timeout = 60.0", "stream_idle_timeout = inf",
     r"\[server\] stream_idle_timeout must be a finite number"),
    ("stream_min_rate = 1024.0", "stream_min_rate = -1",
     r"\[server\] stream_min_rate: stream_min_rate must be a finite number >= 0"),
    ("stream_deadline = 3600.0", "stream_deadline = 0",
     r"\[server\] stream_deadline: .* seconds > 0"),
    ("max_streams_per_caller = 4", "max_streams_per_caller = 0",
     r"\[server\] max_streams_per_caller must be >= 1"),
    ("max_calls_per_caller = 32", "max_calls_per_caller = 4",
     r"\[server\] max_calls_per_caller must be >= 5"),
    # Values the engine would refuse only after every upload committed, refused at load:
    ("tol = 1e-7", "tol = 0", r"\[solver\] tol: tol must be a finite number > 0"),
    ("tol = 1e-7", "tol = nan", r"\[solver\] tol must be a finite number"),
    ("max_iter = 500", "max_iter = 0", r"\[solver\] max_iter must be >= 1"),
    ("v = 0.02", "v = -0.5", r"\[federation\] v: v must be a finite number >= 0"),
    ('method = "aa-igdp-an"', 'method = "aa-igdp"', r"\[federation\] v: v > 0 needs method"),
    ("sigma = 0.0", "sigma = 0.3", r"\[federation\] sigma: sigma > 0 needs a private-data"),
    ("port = 50051", "port = 70000", r"\[server\] port: port must be in 0..65535"),
    ("max_upload_bytes = 8589934592", "max_upload_bytes = 0",
     r"\[server\] max_upload_bytes must be >= 1"),
    ("deadline = 2027-01-31T18:00:00Z", "deadline = 2027-01-31T18:00:00",
     r"\[federation\] deadline: .* has no UTC offset"),
    ("deadline = 2027-01-31T18:00:00Z", 'deadline = "soon"',
     r"\[federation\] deadline must be a date-time"),
    # Durations and dates bounded like the command line's (common.durations.MAX_AHEAD):
    ("deadline = 2027-01-31T18:00:00Z", "deadline = 9999-12-31T00:00:00Z",
     r"analyst.toml: \[federation\] deadline: the deadline 9999-12-31.* more than 731 days"),
    ("stream_idle_timeout = 60.0", "stream_idle_timeout = 1e300",
     r"\[server\] stream_idle_timeout: .* at most 63158400 \(731 days\), got 1e\+300"),
    ('dealer = "org-a"', 'dealer = "org-z"', r"\[federation\] dealer: 'org-z' is not one"),
    ('screening = "refuse"', 'screening = "warn"',
     r"\[federation\] screening: expected one of refuse, exclude, accept, got 'warn'"),
    ("translation_scale = 100.0", "translation_scale = 0", r"\[federation\] translation_scale"),
    ("features = 64", "features = 0", r"\[schema\] features must be >= 1"),
    ("features = 64", "features = 1000000",
     r"\[schema\] features: 1,000,000 features, more than the 100,000 a schema may declare"),
    ("# dim = 256 ", "dim = 65 ",
     r"\[federation\] dim: h = 65 exceeds the record width d = 64 \(\[schema\] features\)"),
    ('dtype = "float64"', 'dtype = "complex"', r"\[schema\] dtype: expected one of"),
    ('# feature_names = ["f0", "f1", ...]', 'feature_names = ["a", "b"]',
     r"\[schema\] feature_names: the schema names 2 features but declares 64"),
    ('name = "logistic"', 'name = "forest"', r"\[model\] name: expected one of"),
    ("# contributions_max_sites = 20", "contributions_max_sites = -1",
     r"\[model\] contributions_max_sites must be >= 0"),
    ('# fit = "auto"', 'fit = "streaming"',
     r"\[model\] fit: expected one of auto, in-memory, out-of-core, dask, got 'streaming'"),
    ('name = "logistic"', 'name = "mlp"\nfit = "out-of-core"',
     r"\[model\] fit: only the logistic model can be fitted out of core, not 'mlp'"),
    ('name = "logistic"', 'name = "mlp"\nfit = "dask"',
     r"\[model\] fit: only the logistic model can be fitted on Dask, not 'mlp'"),
    ('# fit = "auto"', 'scheduler = "tcp://10.0.0.5:8786"',
     r"\[model\] scheduler: only used with fit = \"dask\", not 'auto'"),
    ('# fit = "auto"', 'fit = "dask"\nscheduler = "10.0.0.5:8786"',
     r"\[model\] scheduler: scheduler must be 'local' or a Dask scheduler address"),
    ("# health_port = 50052", "health_port = 70000",
     r"\[server\] health_port: port must be in 0..65535"),
])
def test_analyst_config_errors_name_the_key(workdir, old, new, match):
    path = workdir / "analyst.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match=match):
        load_analyst_config(path)


@pytest.mark.parametrize("old, new, match", [
    ("dealer = \"org-a\"", "dealer = \"org-b\"\nanchor_seed = \"" + "00" * 32 + "\"",
     "only the dealer"),
    ("# dim = 256 ", "dim = 16 ", r"\[protocol\] projection_seed: is required"),
    ("keep_secrets = false", "keep_secrets = 1", "must be true or false"),
    ("v = 0.02", "v = -1", r"\[protocol\] v: v must be a finite number >= 0"),
    # Values the engine would refuse only after the anchor agreement, refused at load:
    ("# timeout = 3600", "timeout = 0", r"\[participant\] timeout: .* seconds > 0"),
    ("# timeout = 3600", "timeout = 1e12",
     r"participant.toml: \[participant\] timeout: .* at most 63158400 \(731 days\)"),
    ("translation_scale = 100.0", "translation_scale = 0",
     r"\[protocol\] translation_scale: translation_scale must be a finite number > 0"),
    ("translation_scale = 100.0", "translation_scale = -inf",
     r"\[protocol\] translation_scale must be a finite number"),
    ('method = "aa-igdp-an"', 'method = "c-gdp"', r"\[protocol\] v: v > 0 needs method"),
    ("sigma = 0.0", "sigma = 0.1", r"\[protocol\] sigma: sigma > 0 needs a private-data"),
    ("# anchors = 256 ", "anchors = 16\ndim = 16\nprojection_seed = 1\n# ",
     r"\[protocol\] anchors: anchors need r >= d \+ 1"),
])
def test_participant_config_errors_name_the_key(workdir, old, new, match):
    path = workdir / "participant.toml"
    path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(ConfigError, match=match):
        load_participant_config(path)


def test_missing_or_broken_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_analyst_config(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("[federation\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_analyst_config(tmp_path / "bad.toml")


def test_a_downstream_model_without_scikit_learn_is_refused_at_load(workdir, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as if the eval extra were missing
    with pytest.raises(ConfigError, match=r"\[model\] name: .*pip install 'noisyanchor\[eval\]'"):
        load_analyst_config(workdir / "analyst.toml")
    path = workdir / "analyst.toml"
    path.write_text(path.read_text().replace('name = "logistic"', 'name = "none"'))
    assert load_analyst_config(path).model == "none"


def test_the_template_declares_schema_deadline_and_protocol(workdir):
    a = load_analyst_config(workdir / "analyst.toml")
    assert (a.schema.features, a.schema.dtype, a.schema.feature_names) == (64, "float64", ())
    assert a.deadline.tzinfo is not None and a.deadline.year == 2027
    assert (a.dealer, a.projection_seed, a.translation_scale, a.model) == (
        "org-a", None, 100.0, "logistic")
    assert a.contributions_max_sites == 20  # the default: the line is commented out
    assert a.fit == "auto"
    assert a.health_port is None and a.log_json is None


def test_a_dask_fit_carries_its_scheduler(workdir):
    pytest.importorskip("distributed")
    path = workdir / "analyst.toml"
    text = path.read_text()
    path.write_text(text.replace('# fit = "auto"', 'fit = "dask"\nscheduler = "tcp://h:8786"'))
    assert load_analyst_config(path).fit == "dask@tcp://h:8786"
    path.write_text(text.replace('# fit = "auto"', 'fit = "dask"'))
    assert load_analyst_config(path).fit == "dask@local"


def test_typed_columns_declare_the_schema_and_its_digest(workdir):
    path = workdir / "analyst.toml"
    typed = ('[schema]\nlabel = "diagnosis"\nlabel_classes = ["benign", "malignant"]\n'
             '[[schema.column]]\nname = "area"\nunit = "mm2"\nmin = 100.0\nmax = 2500.0\n'
             '[[schema.column]]\nname = "site"\ntype = "categorical"\n'
             'categories = ["urban", "rural"]\n')
    text = path.read_text()
    start, end = text.index("[schema]"), text.index("[model]")
    path.write_text(text[:start] + typed + text[end:])
    a = load_analyst_config(path)
    assert a.schema.features == 3 and a.schema.feature_names == ("area", "site=urban",
                                                                   "site=rural")
    assert a.schema.preprocessing_sha256 == a.schema.tabular.digest()
    path.write_text(text[:start] + typed.replace("max = 2500.0", "max = 50.0") + text[end:])
    with pytest.raises(ConfigError, match=r"\[schema.column #1\] \('area'\): .*max must be > min"):
        load_analyst_config(path)
