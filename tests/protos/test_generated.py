"""The checked-in generated modules match ``protos/v1/*.proto`` (regenerate with
``python -m noisyanchor.protos.generate``)."""

import re
import tomllib
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from noisyanchor.protos import generate as generator
from noisyanchor.protos.generate import (
    HERE,
    PROTO_FILES,
    generate,
    installed_tools_version,
    pinned_tools_version,
    protoc_args,
)
from noisyanchor.protos.v1 import analyst_pb2, analyst_pb2_grpc, release_pb2, release_pb2_grpc

#: The repository's project file (the tests' own checkout, however the package is installed).
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

#: The command that regenerates the checked-in code.
REGENERATE = "python -m noisyanchor.protos.generate"

#: Generated modules of each proto file, in PROTO_FILES order.
MODULES = ((analyst_pb2, analyst_pb2_grpc, "Analyst"), (release_pb2, release_pb2_grpc, "Release"))


def _descriptor_set(tmp_path: Path) -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import protoc

    out = tmp_path / "set.pb"
    assert protoc.main(protoc_args(f"--descriptor_set_out={out}")) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _clear_json_names(messages) -> None:
    """Clear the derived json names of every field, nested messages (map entries) included."""
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _clear_json_names(message.nested_type)


def test_checked_in_descriptor_equals_a_fresh_compile_of_the_proto(tmp_path):
    files = _descriptor_set(tmp_path).file
    assert len(files) == len(PROTO_FILES) == len(MODULES)
    for fresh, (module, _, _) in zip(files, MODULES, strict=True):
        _clear_json_names(fresh.message_type)  # the embedded descriptor omits derived names
        checked_in = descriptor_pb2.FileDescriptorProto.FromString(
            module.DESCRIPTOR.serialized_pb)
        assert checked_in == fresh, f"stale generated code: run {REGENERATE}"


def test_grpc_module_serves_every_rpc_of_the_proto():
    for module, grpc_module, service in MODULES:
        rpcs = set(module.DESCRIPTOR.services_by_name[service].methods_by_name)
        servicer = getattr(grpc_module, f"{service}Servicer")
        assert {name for name in vars(servicer) if name[0].isupper()} == rpcs


def test_regeneration_reproduces_the_checked_in_files_byte_for_byte(tmp_path):
    # The descriptor test above catches a stale .proto under any generator; the bytes (runtime
    # floors, type stubs) are those of the pinned one.
    pinned = pinned_tools_version(PYPROJECT)
    if installed_tools_version() != pinned:
        pytest.skip(f"grpcio-tools {installed_tools_version()} is installed, not the dev extra's "
                    f"{pinned}: pip install -e '.[dev]'")
    for path in generate(tmp_path):
        rel = path.relative_to(tmp_path)
        assert path.read_bytes() == (HERE / rel).read_bytes(), f"{rel} is stale: run {REGENERATE}"


def _floor(requirement: str) -> str:
    """The ``>=`` version of a requirement string of pyproject's dependencies."""
    return re.search(r">=\s*([\w.]+)", requirement).group(1)


def test_dependency_floors_are_the_generated_codes_own():
    """pyproject's grpcio and protobuf floors are the versions the checked-in code checks at
    import, so a regeneration with another generator cannot leave them behind."""
    deps = {re.match(r"[\w-]+", d).group(0): d
            for d in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]}
    for module, grpc_module, _ in MODULES:
        source = Path(module.__file__).read_text()
        gencode = re.search(r"# Protobuf Python Version: ([\w.]+)", source).group(1)
        assert _floor(deps["protobuf"]) == gencode, module.__name__
        assert _floor(deps["grpcio"]) == grpc_module.GRPC_GENERATED_VERSION, grpc_module.__name__


def test_the_dev_extra_pins_the_generator_exactly(tmp_path):
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned_tools_version(PYPROJECT))
    loose = tmp_path / "pyproject.toml"
    loose.write_text('[project.optional-dependencies]\ndev = ["grpcio-tools>=1.75"]\n')
    with pytest.raises(ValueError, match="pins no exact grpcio-tools"):
        pinned_tools_version(loose)


def test_command_refuses_another_generator_and_names_the_pinned_one(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(generator, "installed_tools_version", lambda: "0.0.1")
    monkeypatch.setattr("sys.argv", ["generate", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as refused:
        generator.main()
    message = str(refused.value.code)
    assert "grpcio-tools 0.0.1 is installed" in message
    assert f"grpcio-tools=={pinned_tools_version()}" in message
    assert not list(tmp_path.iterdir())  # nothing written
