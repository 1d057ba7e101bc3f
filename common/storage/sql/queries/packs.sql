-- Static SQL of domain packs and namespace settings (common/storage/pack_store.py). Loaded by
-- common/storage/named_queries.py; see there for the placeholders ({domain_packs}, ...) and parameters.

-- name: insert_pack_version
-- Inserts a pack version (parameters: name, version, content); no row returned when (name, version)
-- exists.
INSERT INTO {domain_packs} (name, version, content) VALUES (%s, %s, %s)
ON CONFLICT (name, version) DO NOTHING RETURNING name

-- name: pack_version
-- One registered version of a pack (parameters: name, version).
SELECT name, version, content, created_at FROM {domain_packs} WHERE name = %s AND version = %s

-- name: latest_pack_version
-- The latest registered version of a pack (parameter: name): newest created_at, then highest version.
SELECT name, version, content, created_at FROM {domain_packs} WHERE name = %s
ORDER BY created_at DESC, version DESC LIMIT 1

-- name: pack_versions_after
-- One page of pack versions ordered by (name, version), strictly after a position (parameters: name,
-- version, page size).
SELECT name, version, content, created_at FROM {domain_packs}
WHERE (name, version) > (%s, %s) ORDER BY name, version LIMIT %s

-- name: namespace_settings
-- The pack settings of a namespace (parameter: namespace).
SELECT namespace, packages, strict FROM {namespace_settings} WHERE namespace = %s

-- name: set_namespace_settings
-- Stores the pack settings of a namespace (parameters: namespace, packages, strict), replacing them.
INSERT INTO {namespace_settings} (namespace, packages, strict) VALUES (%s, %s, %s)
ON CONFLICT (namespace) DO UPDATE SET packages = EXCLUDED.packages, strict = EXCLUDED.strict, updated_at = now()
