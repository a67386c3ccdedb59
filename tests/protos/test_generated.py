"""The checked-in generated modules match ``protos/noisyanchor/v1/*.proto`` (regenerate with
``python -m protos.generate``)."""

from pathlib import Path

from google.protobuf import descriptor_pb2

from protos.generate import PROTO_FILES, ROOT, generate
from protos.noisyanchor.v1 import analyst_pb2, analyst_pb2_grpc, release_pb2, release_pb2_grpc

#: Generated modules of each proto file, in PROTO_FILES order.
MODULES = ((analyst_pb2, analyst_pb2_grpc, "Analyst"), (release_pb2, release_pb2_grpc, "Release"))


def _descriptor_set(tmp_path: Path) -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import protoc

    out = tmp_path / "set.pb"
    include = Path(protoc.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{ROOT}", f"-I{include}", f"--descriptor_set_out={out}",
                        *(str(ROOT / p) for p in PROTO_FILES)]) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def test_checked_in_descriptor_equals_a_fresh_compile_of_the_proto(tmp_path):
    files = _descriptor_set(tmp_path).file
    assert len(files) == len(PROTO_FILES) == len(MODULES)
    for fresh, (module, _, _) in zip(files, MODULES, strict=True):
        for message in fresh.message_type:  # the embedded descriptor omits the derived json names
            for field in message.field:
                field.ClearField("json_name")
        checked_in = descriptor_pb2.FileDescriptorProto.FromString(
            module.DESCRIPTOR.serialized_pb)
        assert checked_in == fresh, "stale generated code: run python -m protos.generate"


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
        assert body(path) == body(ROOT / rel), f"{rel} is stale: run python -m protos.generate"
