"""INI files: `[section]` headers, `key = value` or `key: value` pairs, `;` / `#` comments.

Keys are case-insensitive (stored lower-case); section names are case-sensitive. Pairs before
the first header belong to the "DEFAULT" section, whose values every section inherits.
"""
from __future__ import annotations

DEFAULT = "DEFAULT"
TRUE = {"1", "yes", "true", "on"}
FALSE = {"0", "no", "false", "off"}


class ParseError(ValueError):
    def __init__(self, lineno: int, message: str):
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


class Config:
    def __init__(self) -> None:
        self.sections: dict[str, dict[str, str]] = {DEFAULT: {}}

    def add_section(self, name: str) -> dict[str, str]:
        return self.sections.setdefault(name, {})

    def set(self, section: str, key: str, value: str) -> None:
        self.add_section(section)[key.lower()] = str(value)

    def get(self, section: str, key: str, fallback: str | None = None) -> str | None:
        key = key.lower()
        values = self.sections.get(section, {})
        if key in values:
            return values[key]
        return self.sections[DEFAULT].get(key, fallback)

    def getint(self, section: str, key: str, fallback: int | None = None) -> int | None:
        value = self.get(section, key)
        return fallback if value is None else int(value)

    def getbool(self, section: str, key: str, fallback: bool | None = None) -> bool | None:
        value = self.get(section, key)
        if value is None:
            return fallback
        v = value.strip().lower()
        if v in TRUE:
            return True
        if v in FALSE:
            return False
        raise ValueError(f"not a boolean: {value!r}")

    def section_names(self) -> list[str]:
        return [s for s in self.sections if s != DEFAULT]


def _split_pair(line: str, lineno: int) -> tuple[str, str]:
    cut = [i for i in (line.find("="), line.find(":")) if i > 0]
    if not cut:
        raise ParseError(lineno, f"expected 'key = value', got {line!r}")
    i = min(cut)
    return line[:i].strip(), line[i + 1:].strip()


def loads(text: str) -> Config:
    cfg = Config()
    section = DEFAULT
    last_key: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped[0] in ";#":
            continue
        if raw[0] in " \t" and last_key is not None:  # continuation of the previous value
            values = cfg.sections[section]
            values[last_key] = f"{values[last_key]}\n{stripped}"
            continue
        if stripped.startswith("["):
            if not stripped.endswith("]"):
                raise ParseError(lineno, f"unterminated section header {stripped!r}")
            section = stripped[1:-1].strip()
            cfg.add_section(section)
            last_key = None
            continue
        key, value = _split_pair(stripped, lineno)
        cfg.set(section, key, value)
        last_key = key.lower()
    return cfg


def dumps(cfg: Config) -> str:
    out: list[str] = []
    for name in ([DEFAULT] if cfg.sections[DEFAULT] else []) + cfg.section_names():
        if out:
            out.append("")
        out.append(f"[{name}]")
        for key, value in cfg.sections[name].items():
            out.append(f"{key} = {value}".rstrip() if "\n" not in value else f"{key} = " + value.replace("\n", "\n    "))
    return "\n".join(out) + "\n"
