-- Static SQL of the original files of documents (common/storage/document_original_store.py). Loaded by
-- common/storage/named_queries.py.

-- name: insert_document_original
-- Keeps an original's bytes once per namespace and sha256 (parameters: namespace, sha256, media type,
-- size, bytes); an existing row is left as it is.
INSERT INTO {document_originals} (namespace, sha256, media_type, size_bytes, data)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (namespace, sha256) DO NOTHING

-- name: upsert_document_file
-- Records which original a document was converted from (parameters: namespace, natural key, sha256,
-- media type, size, converter, converter version, page status as JSON). Returns the sha256 it replaced
-- (NULL when new or the same).
WITH previous AS (
    SELECT sha256 FROM {document_files} WHERE namespace = %(namespace)s AND natural_key = %(natural_key)s
)
INSERT INTO {document_files} AS f
    (namespace, natural_key, sha256, media_type, size_bytes, converter, converter_version, page_status)
VALUES (%(namespace)s, %(natural_key)s, %(sha256)s, %(media_type)s, %(size_bytes)s, %(converter)s,
        %(converter_version)s, %(page_status)s)
ON CONFLICT (namespace, natural_key) DO UPDATE SET
    sha256 = excluded.sha256, media_type = excluded.media_type, size_bytes = excluded.size_bytes,
    converter = excluded.converter, converter_version = excluded.converter_version,
    page_status = excluded.page_status,
    converted_at = CASE WHEN f.sha256 = excluded.sha256 AND f.converter_version = excluded.converter_version
                        THEN f.converted_at ELSE now() END
RETURNING (SELECT p.sha256 FROM previous p WHERE p.sha256 <> f.sha256)

-- name: delete_document_file
-- Forgets which original a document came from (parameters: namespace, natural key). Returns its sha256.
DELETE FROM {document_files} WHERE namespace = %s AND natural_key = %s RETURNING sha256

-- name: delete_unreferenced_original
-- Deletes an original no document of its namespace names any more (parameters: namespace, sha256,
-- namespace).
DELETE FROM {document_originals} o
WHERE o.namespace = %s AND o.sha256 = %s
  AND NOT EXISTS (SELECT 1 FROM {document_files} f WHERE f.namespace = %s AND f.sha256 = o.sha256)

-- name: select_document_file
-- What a document was converted from (parameters: namespace, natural key).
SELECT sha256, media_type, size_bytes, converter, converter_version, page_status
FROM {document_files} WHERE namespace = %s AND natural_key = %s

-- name: select_document_original_bytes
-- The bytes of an original (parameters: namespace, sha256).
SELECT data FROM {document_originals} WHERE namespace = %s AND sha256 = %s
