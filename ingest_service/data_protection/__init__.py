"""Data protection: erasure of a subject, legal holds, retention, namespace export and import."""
