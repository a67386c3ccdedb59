"""Regenerate the checked-in protobuf and gRPC modules: ``python -m noisyanchor.protos.generate``.

The ``.proto`` files live in ``protos/v1/`` of the repository, which installs as the Python package
``noisyanchor.protos.v1``. protoc is given that folder under the virtual include path
``noisyanchor/protos`` (``-Inoisyanchor/protos=<folder>``), so the generated modules import each
other as ``noisyanchor.protos.v1.*`` and work from a wheel or an editable install alike. The wire
package stays ``noisyanchor.v1``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

#: The ``protos/`` folder (installed as ``noisyanchor.protos``).
HERE = Path(__file__).resolve().parent
#: Virtual include root under which protoc sees ``HERE``.
VIRTUAL_ROOT = "noisyanchor/protos"
#: The proto files by their virtual names (as they import each other).
PROTO_FILES = (f"{VIRTUAL_ROOT}/v1/analyst.proto", f"{VIRTUAL_ROOT}/v1/release.proto")


def protoc_args(*outputs: str) -> list[str]:
    """protoc's command line: include paths, ``outputs`` flags and the proto files."""
    from grpc_tools import protoc

    include = Path(protoc.__file__).parent / "_proto"
    return ["protoc", f"-I{VIRTUAL_ROOT}={HERE}", f"-I{include}", *outputs, *PROTO_FILES]


def generate(out_dir: Path = HERE) -> list[Path]:
    """Compile every proto into ``out_dir/v1`` (``*_pb2.py``, its type stub ``*_pb2.pyi`` for
    type checkers, and ``*_pb2_grpc.py``).

    Returns the generated paths. Needs ``grpcio-tools`` (the ``dev`` extra).
    """
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        outputs = (f"--python_out={tmp}", f"--pyi_out={tmp}", f"--grpc_python_out={tmp}")
        if protoc.main(protoc_args(*outputs)) != 0:
            raise RuntimeError(f"protoc failed on {', '.join(PROTO_FILES)}")
        built = Path(tmp) / VIRTUAL_ROOT
        out: list[Path] = []
        for path in sorted(built.rglob("*_pb2*.py*")):
            target = Path(out_dir) / path.relative_to(built)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            out.append(target)
    return out


def main() -> None:
    """Command-line entry: regenerate in place (or into ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE,
                        help="output folder holding v1/ (default: in place)")
    for path in generate(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
