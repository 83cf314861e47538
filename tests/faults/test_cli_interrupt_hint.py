"""A Ctrl-C that lands in click's start-up of `pack convert ... --resume`, before the
conversion begins, leaves the earlier run's state as it was: the message still says how
to continue (tests/faults/test_faults_kill.py caught "interrupted" alone there, state left)."""

from __future__ import annotations

import pytest

import pack_cli
from pack_cli._terminal import RESUME_HINT


def stopped_in_start_up(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                        argv: list[str]) -> str:
    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pack_cli.main, "main", interrupted)
    with pytest.raises(SystemExit) as exit_:
        pack_cli.run(argv)
    assert exit_.value.code == 130
    return capsys.readouterr().err.strip()


def test_a_resume_rerun_says_how_to_continue(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["convert", "src", "dst", "--to", "lmdb", "--resume"]
    assert stopped_in_start_up(monkeypatch, capsys, argv) == RESUME_HINT


def test_a_first_run_says_interrupted(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["convert", "src", "dst", "--to", "lmdb"]
    assert stopped_in_start_up(monkeypatch, capsys, argv) == "interrupted"
