-- The original files of documents retained from a file (PDF, DOCX, HTML, ...; docs/how-to/documents.md).
-- document_originals holds the exact bytes once per namespace and sha256 (content-addressed: two
-- documents of one file share a row); tenants never share a row, so a deletion in one namespace cannot
-- touch another's and the existence of a file in another namespace is never revealed by a write.
-- document_files says which original a document node was converted from, as what and by which converter;
-- a row goes with its node (DeleteNode, a vault sweep) and an original no document names any more is
-- deleted in the same transaction.
CREATE TABLE IF NOT EXISTS {document_originals} (
    namespace text NOT NULL,
    sha256 text NOT NULL,
    media_type text NOT NULL,
    size_bytes bigint NOT NULL,
    data bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, sha256)
);
CREATE TABLE IF NOT EXISTS {document_files} (
    namespace text NOT NULL,
    natural_key text NOT NULL,
    sha256 text NOT NULL,
    media_type text NOT NULL,
    size_bytes bigint NOT NULL,
    converter text NOT NULL,
    converter_version text NOT NULL,
    page_status jsonb NOT NULL DEFAULT '[]'::jsonb,
    converted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, natural_key)
);
CREATE INDEX IF NOT EXISTS {document_files_sha256_idx} ON {document_files} (namespace, sha256);
