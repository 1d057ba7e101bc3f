"""Every service, RPC, message, field, enum and enum value of the contract has a comment:
the generated clients of other languages carry them, and they are the documentation other teams read.

protoc (grpcio-tools) compiles protos/memory/v1 with its source info; a declaration without a leading or
trailing comment is listed by its full name.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]

# Field numbers in descriptor.proto: the path of a declaration in SourceCodeInfo.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM = 2, 3, 4
ENUM_VALUE, SERVICE_METHOD = 2, 2


def _descriptors(tmp_path: Path) -> descriptor_pb2.FileDescriptorSet:
    out = tmp_path / "contract.pb"
    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos/memory/v1").glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    code = protoc.main(
        [
            "protoc",
            f"-I{ROOT / 'protos'}",
            f"-I{include}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
        ]
        + protos
    )
    assert code == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def uncommented(files: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """Full names of the declarations without a comment."""
    missing: list[str] = []
    for file in files.file:
        commented = {
            tuple(location.path)
            for location in file.source_code_info.location
            if location.leading_comments.strip() or location.trailing_comments.strip()
        }

        def need(path: tuple[int, ...], name: str, commented: set[tuple[int, ...]] = commented) -> None:
            if path not in commented:
                missing.append(name)

        def enum(path: tuple[int, ...], value: descriptor_pb2.EnumDescriptorProto, prefix: str) -> None:
            need(path, f"{prefix}.{value.name}")
            for index, item in enumerate(value.value):
                need((*path, ENUM_VALUE, index), f"{prefix}.{value.name}.{item.name}")

        def message(path: tuple[int, ...], value: descriptor_pb2.DescriptorProto, prefix: str) -> None:
            name = f"{prefix}.{value.name}"
            need(path, name)
            for index, item in enumerate(value.field):
                need((*path, MESSAGE_FIELD, index), f"{name}.{item.name}")
            for index, item in enumerate(value.nested_type):
                if not item.options.map_entry:  # a map<k, v> field's generated entry message
                    message((*path, MESSAGE_NESTED, index), item, name)
            for index, item in enumerate(value.enum_type):
                enum((*path, MESSAGE_ENUM, index), item, name)

        for index, item in enumerate(file.message_type):
            message((FILE_MESSAGE, index), item, file.package)
        for index, item in enumerate(file.enum_type):
            enum((FILE_ENUM, index), item, file.package)
        for index, service in enumerate(file.service):
            need((FILE_SERVICE, index), f"{file.package}.{service.name}")
            for number, method in enumerate(service.method):
                need(
                    (FILE_SERVICE, index, SERVICE_METHOD, number),
                    f"{file.package}.{service.name}.{method.name}",
                )
    return missing


def test_every_declaration_of_the_contract_has_a_comment(tmp_path: Path) -> None:
    assert uncommented(_descriptors(tmp_path)) == []


def test_the_check_finds_an_uncommented_field(tmp_path: Path) -> None:
    """The check itself can fail: a field whose comment is dropped is reported by name."""
    files = _descriptors(tmp_path)
    file = next(f for f in files.file if f.name == "memory/v1/knowledge.proto")
    target = (FILE_MESSAGE, 0, MESSAGE_FIELD, 0)
    for location in file.source_code_info.location:
        if tuple(location.path) == target:
            location.leading_comments = location.trailing_comments = ""
    name = f"memory.v1.{file.message_type[0].name}.{file.message_type[0].field[0].name}"
    assert uncommented(files) == [name]
