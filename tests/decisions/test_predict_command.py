"""``jevlaya-lab predict``: states in, one JSON result per line out."""

from __future__ import annotations

import json

from jevlaya_lab.cli import main


def test_predict_command_prints_one_json_result_per_state(tiny_checkpoint_dir, questions, capsys, tmp_path):
    states_file = tmp_path / "states.jsonl"
    states_file.write_text('{"subject": "refund"}\n["hello", "bye"]\n')
    code = main(["predict", "--model", str(tiny_checkpoint_dir), "--questions", json.dumps(questions),
                 "--state", "I want a refund", "--state-json", '{"a": 1}',
                 "--states-file", str(states_file), "--min-confidence", "0.5", "--events"])
    out, err = capsys.readouterr()
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 4
    assert all(set(r["answers"]) == set(questions) for r in lines)
    assert all("abstention" in a for r in lines for a in r["answers"].values())
    assert "on_predict_start" in err and "on_predict_end" in err


def test_predict_command_reads_questions_from_a_file_and_states_from_a_text_file(tiny_checkpoint_dir, questions,
                                                                               capsys, tmp_path):
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(questions))
    sfile = tmp_path / "states.txt"
    sfile.write_text("first state\n\nsecond state\n")
    assert main(["predict", "--model", str(tiny_checkpoint_dir), "--questions", str(qfile),
                 "--states-file", str(sfile)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_predict_command_reports_bad_input_with_exit_code_2(tiny_checkpoint_dir, capsys):
    bad = json.dumps({"q": {"type": "choice", "instructions": "x"}})
    assert main(["predict", "--model", str(tiny_checkpoint_dir), "--questions", bad, "--state", "s"]) == 2
    assert "question 'q': missing 'criteria'" in capsys.readouterr().err
    assert main(["predict", "--model", str(tiny_checkpoint_dir), "--preset", "nope", "--state", "s"]) == 2
    assert "--preset 'nope' is unknown" in capsys.readouterr().err
