"""Tests of magpy.api: the public API, explain and its HTML page, save/load/export, logs, how a
compiled module looks to libraries, and the documentation site."""
