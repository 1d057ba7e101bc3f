"""Documents that arrive as bytes (PDF, DOCX, PPTX, XLSX, HTML, EPUB, EML/MBOX, text) converted to Markdown
in a child process with limits, with the place each part came from (page, slide, sheet and cell range).

`media_types` sniffs the true type from the bytes; `formats` holds one converter per type; `sandbox`
runs a converter in a child process under CPU, memory and wall-time limits; `conversion` is the entry
point the document writer calls (`DocumentConverter`); `citations` renders "manual.pdf, p. 12".
See docs/how-to/documents.md and docs/decisions/0040-document-converters.md.
"""
