"""The checked-in generated modules match ``protos/v1/*.proto`` (regenerate with
``python -m noisyanchor.protos.generate``)."""

from pathlib import Path

from google.protobuf import descriptor_pb2

from noisyanchor.protos.generate import HERE, PROTO_FILES, generate, protoc_args
from noisyanchor.protos.v1 import analyst_pb2, analyst_pb2_grpc, release_pb2, release_pb2_grpc

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


def test_regeneration_reproduces_the_checked_in_files(tmp_path):
    # Version stamps of the generator may differ between installs; the code below them may not.
    def body(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines()
                if "Version" not in line and "VERSION" not in line
                and not line.strip().rstrip(",").isdigit()]

    for path in generate(tmp_path):
        rel = path.relative_to(tmp_path)
        assert body(path) == body(HERE / rel), f"{rel} is stale: run {REGENERATE}"
