"""inikit: read and write INI configuration files."""
from inikit.config import Config, ParseError, dumps, loads

__all__ = ["Config", "ParseError", "dumps", "loads"]
