"""Generates the gRPC API reference (docs/reference/grpc/) from protos/memory/v1/*.proto at build time.

protoc (grpcio-tools) compiles the protos into a FileDescriptorSet with source info; the comments are read
from its SourceCodeInfo, so every page says what the proto files say. One page per file: a service's
RPCs, then the messages and enums the file defines, each field with its type and comment.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mkdocs_gen_files
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE_DIR = PROTO_ROOT / "memory" / "v1"
OUT = "reference/grpc"

# FileDescriptorProto field numbers used in SourceCodeInfo paths (descriptor.proto).
MESSAGE_TYPE, ENUM_TYPE, SERVICE = 4, 5, 6
FIELD, NESTED_TYPE, NESTED_ENUM = 2, 3, 4
ENUM_VALUE, METHOD = 2, 2

LABELS = {descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED: "repeated "}
SCALARS = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """Runs protoc over the package's .proto files and returns their descriptors with comments."""
    from grpc_tools import protoc  # the test extra's protoc: the one that builds the stubs

    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        files = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", "--include_source_info", f"--descriptor_set_out={out}"]
        if protoc.main(args + files) != 0:
            sys.exit("protoc failed on protos/memory/v1")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def comments(file: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    """Leading (else trailing) comment of every commented element, by its SourceCodeInfo path."""
    found = {}
    for loc in file.source_code_info.location:
        text = loc.leading_comments or loc.trailing_comments
        if text.strip():
            lines = [line[1:] if line.startswith(" ") else line for line in text.strip("\n").split("\n")]
            found[tuple(loc.path)] = " ".join(line.strip() for line in lines if line.strip())
    return found


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


class Index:
    """Where each message and enum of the package is documented (page and anchor)."""

    def __init__(self, files: list[descriptor_pb2.FileDescriptorProto]) -> None:
        self.pages: dict[str, str] = {}
        for file in files:
            page = page_name(file)
            for name in defined_names(file):
                self.pages[name] = page

    def link(self, type_name: str, from_page: str) -> str:
        name = type_name.lstrip(".")
        short = name.removeprefix("memory.v1.")
        page = self.pages.get(name)
        if page is None:  # google.protobuf.* and other imports
            return f"`{name}`"
        target = "" if page == from_page else f"{page}.md"
        return f"[`{short}`]({target}#{anchor(name)})"


def anchor(full_name: str) -> str:
    return full_name.replace(".", "-").lower()


def page_name(file: descriptor_pb2.FileDescriptorProto) -> str:
    return Path(file.name).stem


def defined_names(file: descriptor_pb2.FileDescriptorProto) -> Iterator[str]:
    def walk(prefix: str, messages) -> Iterator[str]:
        for message in messages:
            yield f"{prefix}.{message.name}"
            yield from walk(f"{prefix}.{message.name}", message.nested_type)
            for enum in message.enum_type:
                yield f"{prefix}.{message.name}.{enum.name}"

    yield from walk(file.package, file.message_type)
    for enum in file.enum_type:
        yield f"{file.package}.{enum.name}"


def field_type(field: descriptor_pb2.FieldDescriptorProto, index: Index, page: str, maps: dict) -> str:
    if field.type_name.lstrip(".") in maps:
        key, value = maps[field.type_name.lstrip(".")]
        return f"map&lt;{field_type(key, index, page, {})}, {field_type(value, index, page, {})}&gt;"
    base = index.link(field.type_name, page) if field.type_name else f"`{SCALARS[field.type]}`"
    optional = "optional " if field.proto3_optional else ""
    return LABELS.get(field.label, "") + optional + base


def render_message(out, file, message, path, prefix, docs, index, page) -> None:
    full = f"{prefix}.{message.name}"
    if message.options.map_entry:
        return
    maps = {
        f"{full}.{nested.name}": (nested.field[0], nested.field[1])
        for nested in message.nested_type
        if nested.options.map_entry
    }
    out.write(f"### {full.removeprefix('memory.v1.')} {{#{anchor(full)}}}\n\n")
    if path in docs:
        out.write(escape(docs[path]) + "\n\n")
    if message.field:
        oneofs = [o.name for o in message.oneof_decl]
        out.write("| field | type | description |\n|---|---|---|\n")
        for i, field in enumerate(message.field):
            note = docs.get(path + (FIELD, i), "")
            if field.HasField("oneof_index") and not field.proto3_optional:
                note = f"(one of `{oneofs[field.oneof_index]}`) {note}"
            kind = field_type(field, index, page, maps)
            out.write(f"| `{field.name}` | {kind} | {escape(note)} |\n")
        out.write("\n")
    for i, enum in enumerate(message.enum_type):
        render_enum(out, enum, path + (NESTED_ENUM, i), full, docs)
    for i, nested in enumerate(message.nested_type):
        render_message(out, file, nested, path + (NESTED_TYPE, i), full, docs, index, page)


def render_enum(out, enum, path, prefix, docs) -> None:
    full = f"{prefix}.{enum.name}"
    out.write(f"### {full.removeprefix('memory.v1.')} {{#{anchor(full)}}}\n\n")
    if path in docs:
        out.write(escape(docs[path]) + "\n\n")
    out.write("| value | number | description |\n|---|---|---|\n")
    for i, value in enumerate(enum.value):
        out.write(f"| `{value.name}` | {value.number} | {escape(docs.get(path + (ENUM_VALUE, i), ''))} |\n")
    out.write("\n")


def render_file(file: descriptor_pb2.FileDescriptorProto, index: Index) -> str:
    import io

    docs = comments(file)
    page = page_name(file)
    out = io.StringIO()
    title = ", ".join(s.name for s in file.service) or f"Shared messages: {Path(file.name).name}"
    out.write(f"# {title}\n\n")
    out.write(f"Generated at build time from `protos/{file.name}`.\n\n")
    for s, service in enumerate(file.service):
        out.write(f"## {service.name}\n\n")
        if (SERVICE, s) in docs:
            out.write(escape(docs[(SERVICE, s)]) + "\n\n")
        for m, method in enumerate(service.method):
            stream_in = "stream " if method.client_streaming else ""
            stream_out = "stream " if method.server_streaming else ""
            request = index.link(method.input_type, page)
            response = index.link(method.output_type, page)
            out.write(f"### {method.name} {{#{anchor(f'{file.package}.{service.name}.{method.name}')}}}\n\n")
            out.write(f"`rpc {method.name}` ({stream_in}{request}) returns ({stream_out}{response})\n\n")
            if (SERVICE, s, METHOD, m) in docs:
                out.write(escape(docs[(SERVICE, s, METHOD, m)]) + "\n\n")
    if file.message_type or file.enum_type:
        out.write("## Messages and enums\n\n")
    for i, message in enumerate(file.message_type):
        render_message(out, file, message, (MESSAGE_TYPE, i), file.package, docs, index, page)
    for i, enum in enumerate(file.enum_type):
        render_enum(out, enum, (ENUM_TYPE, i), file.package, docs)
    return out.getvalue()


def main() -> None:
    files = [f for f in descriptor_set().file if f.package == "memory.v1"]
    index = Index(files)
    with_services = sorted((f for f in files if f.service), key=lambda f: f.service[0].name)
    shared = sorted((f for f in files if not f.service), key=lambda f: f.name)
    for file in files:
        with mkdocs_gen_files.open(f"{OUT}/{page_name(file)}.md", "w") as out:
            out.write(render_file(file, index))
    with mkdocs_gen_files.open(f"{OUT}/index.md", "w") as out:
        out.write("# gRPC API\n\n")
        out.write(
            "The services' contract, package `memory.v1`, generated at build time from the comments of "
            "`protos/memory/v1/*.proto`. Writes go to the ingest service (default `127.0.0.1:50051`), "
            "reads to the query service (`127.0.0.1:50052`); errors are described in "
            "[Error reasons](../errors.md).\n\n"
        )
        out.write("| service | file | RPCs |\n|---|---|---|\n")
        for file in with_services:
            for service in file.service:
                rpcs = ", ".join(m.name for m in service.method)
                out.write(f"| [{service.name}]({page_name(file)}.md) | `{Path(file.name).name}` | {rpcs} |\n")
        out.write("\nMessages shared by several services: ")
        out.write(", ".join(f"[`{Path(f.name).name}`]({page_name(f)}.md)" for f in shared) + ".\n")


main()
