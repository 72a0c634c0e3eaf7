"""docs/configuration.md is generated from the schema and the defaults (`make docs`)."""

from __future__ import annotations

import yaml

from ringflow import docs_config


def test_the_committed_reference_is_what_make_docs_writes():
    committed = docs_config.TARGET.read_text()
    assert committed == docs_config.generate(), (
        "docs/configuration.md is stale: run `make docs` and commit it"
    )


def test_every_schema_key_is_in_the_reference_with_its_default():
    schema = yaml.safe_load(docs_config.SCHEMA.read_text())
    defaults = yaml.safe_load(docs_config.DEFAULTS.read_text())
    text = docs_config.generate()

    def walk(prefix, node, values):
        for name, sub in node.get("properties", {}).items():
            key = f"{prefix}{name}"
            top_section = not prefix and "properties" in sub
            assert (f"## `{key}`" if top_section else f"| `{key}` |") in text, key
            if "properties" in sub:
                walk(f"{key}.", sub, values.get(name, {}))
            elif name in values:
                assert f"| `{key}` | " in text and docs_config._default(values[name]) in text

    walk("", schema, defaults)


def test_a_changed_description_changes_the_reference(tmp_path):
    schema = yaml.safe_load(docs_config.SCHEMA.read_text())
    schema["properties"]["ring_id"]["description"] = "A name nobody wrote before."
    changed = tmp_path / "schema.yaml"
    changed.write_text(yaml.safe_dump(schema))
    text = docs_config.generate(changed, docs_config.DEFAULTS)
    assert "A name nobody wrote before." in text
    assert text != docs_config.TARGET.read_text()


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("# old\n")
    assert docs_config.main(["--check", "--out", str(stale)]) == 1
    assert "make docs" in capsys.readouterr().err
    assert docs_config.main(["--out", str(stale)]) == 0
    assert docs_config.main(["--check", "--out", str(stale)]) == 0
