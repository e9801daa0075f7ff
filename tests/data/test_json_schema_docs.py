"""docs/json-schema.md's example is a document the schema accepts, with every GPU field."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import jsonschema

from gpumon.data.model import GpuStats

ROOT = Path(__file__).resolve().parents[2]


def docs_example() -> dict[str, object]:
    docs = (ROOT / "docs" / "json-schema.md").read_text()
    match = re.search(r"## Example\s+```json\n(.*?)\n```", docs, re.DOTALL)
    assert match is not None, "docs/json-schema.md has no ## Example json block"
    document: dict[str, object] = json.loads(match.group(1))
    return document


def test_the_docs_example_validates_against_the_schema() -> None:
    schema = json.loads((ROOT / "gpumon" / "schema" / "once.schema.json").read_text())

    jsonschema.Draft202012Validator(schema).validate(docs_example())


def test_the_docs_example_shows_every_gpu_field_in_model_order() -> None:
    gpu = docs_example()["gpus"][0]  # type: ignore[index]
    model = [field.name for field in dataclasses.fields(GpuStats)]

    assert [name for name in gpu if name in model] == model
