"""The report's cells and extra tables: number formatting, and a table drawn the same way on the console, in
summary.md and on report.html (the load figures and the load-tool cross-check are such tables)."""

from __future__ import annotations

from dataclasses import dataclass, field


def fmt(x: float | None, digits: int = 1, signed: bool = False) -> str:
    """A number for a cell; "–" for none."""
    if x is None:
        return "–"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def pct(x: float | None) -> str:
    """A ratio (0..1) as a whole percentage; "–" for none."""
    return "–" if x is None else f"{x * 100:.0f}%"


@dataclass
class Table:
    """One table of a scenario: a title, a header, rows of cells (the first ``left`` columns, text, left-aligned; the
    rest right-aligned), notes below."""

    title: str
    columns: tuple[str, ...]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    bad_rows: set[int] = field(default_factory=set)  # indexes of rows to mark (a disagreement)
    left: int = 1


def markdown(table: Table) -> list[str]:
    lines = [f"{table.title}:", "", "| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" if i < table.left else "--:" for i in range(len(table.columns))) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table.rows]
    return lines + ([""] + [f"- {note}" for note in table.notes] if table.notes else [])


def aligned(rows: list[list[str]], left: int) -> list[str]:
    """Rows as columns: the first ``left`` ones left-aligned, the rest right-aligned, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def console(table: Table) -> list[str]:
    lines = aligned([list(table.columns)] + table.rows, left=table.left)
    return [f"  {table.title}:"] + ["  " + line for line in lines] + ["  " + note for note in table.notes]
