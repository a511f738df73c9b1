"""Reading tables: CSV/TSV with a header row (the columns that hold JSON decoded as such) and Parquet
(row by row when a string cell holds bytes that are not UTF-8), as ``(line, record | BadRecord)``."""

from __future__ import annotations

import ast
import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import IngestError
from .jsontext import BadJSON, check_value, cut_message, is_safe_text, load_json
from .lines import MAX_LINE_BYTES, BadRecord, decode_line, read_lines


def _csv_value(v: str) -> Any:
    return v if v != "" else None


def _csv_json(text: str) -> Any:
    """A JSON cell, or a Python literal list/dict (what pandas' ``to_csv`` writes for a list);
    ``BadJSON`` when either holds what cannot be stored."""
    try:
        return load_json(text)
    except json.JSONDecodeError as e:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise e from None
        if not isinstance(value, list | dict):
            raise e from None
        check_value(value)
        return value


def read_csv(f: IO[bytes], delimiter: str, json_columns: frozenset[str] | set[str] = frozenset(),
             ) -> Iterator[tuple[int, dict | BadRecord]]:
    """CSV/TSV with a header row. Only the columns in ``json_columns`` (the retrieved chunks, meta)
    are read as JSON; every other cell is text, whatever it starts with. A field may be as long as
    a record (16 MiB)."""
    if csv.field_size_limit() < MAX_LINE_BYTES:
        csv.field_size_limit(MAX_LINE_BYTES)
    bad: dict[int, BadRecord] = {}
    cut: list[int] = []  # lines with bytes that are not UTF-8, to look for in their record's cells

    def decoded() -> Iterator[str]:
        for n, raw in read_lines(f, MAX_LINE_BYTES):
            if isinstance(raw, BadRecord):
                bad[n] = raw
                yield "\n"
                continue
            text, escaped = decode_line(raw)
            if escaped:
                cut.append(n)
            yield text

    reader = csv.reader(decoded(), delimiter=delimiter)
    header: list[str] | None = None
    start = 1
    for row in reader:
        line = start
        start = reader.line_num + 1
        if line in bad:
            yield line, bad.pop(line)
            continue
        if header is None:
            header = [h.strip().lstrip("\ufeff") for h in row]
            continue
        if not row or row == [""]:
            continue
        if len(row) != len(header):
            yield line, BadRecord("row", f"has {len(row)} fields, the header has {len(header)}")
            continue
        if cut:
            cut[:] = [n for n in cut if n > reader.line_num]
            cell = next(((k, v) for k, v in zip(header, row, strict=True) if not is_safe_text(v)), None)
            if cell is not None:
                yield line, BadRecord(cell[0], cut_message(cell[1]))
                continue
        record: dict[str, Any] = {}
        for key, value in zip(header, row, strict=True):
            v = _csv_value(value)
            if isinstance(v, str) and key in json_columns:
                try:
                    v = _csv_json(v)
                except BadJSON as e:
                    yield line, BadRecord(key if e.field == "json" else key + ("" if e.field.startswith("[") else ".") + e.field,
                                          e.message)
                    break
                except json.JSONDecodeError as e:
                    yield line, BadRecord(key, f"is not valid JSON: {e}")
                    break
            record[key] = v
        else:
            yield line, record


def read_parquet(path: Path) -> Iterator[tuple[int, dict | BadRecord]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise IngestError(f"{path}: not a readable Parquet file: {e}") from None
    row = 0
    for batch in pf.iter_batches(batch_size=4096):
        try:
            records = batch.to_pylist()
        except UnicodeDecodeError:  # a string cell holding bytes that are not UTF-8 (Arrow does not check)
            yield from _parquet_rows(batch, row)
            row += batch.num_rows
            continue
        for record in records:
            row += 1
            yield row, record


def _parquet_rows(batch: Any, before: int) -> Iterator[tuple[int, dict | BadRecord]]:
    """A batch with an undecodable string, row by row, so that only its row is a BadRecord, which
    names the column."""
    for i in range(batch.num_rows):
        try:
            record = batch.slice(i, 1).to_pylist()[0]
        except UnicodeDecodeError as e:
            column = next((name for name, col in zip(batch.schema.names, batch.columns, strict=True)
                           if not _decodes(col, i)), "encoding")
            yield before + i + 1, BadRecord(column, f"not valid UTF-8 ({e.reason})")
            continue
        yield before + i + 1, record


def _decodes(column: Any, i: int) -> bool:
    try:
        column[i].as_py()
    except UnicodeDecodeError:
        return False
    return True
