"""A lab run's recording holds every request the run counted, with its timeline:
what-if replays the recording and compares its figures with the run's.

A request is done (and the workload returns) inside its last step, while that step's timeline and step record
reach the flight recorder only when the step ends: on a busy machine the last frame was once taken in between,
and the recording held one request fewer than the run (`assert 45 == 46` in
test_whatif_command.py::test_whatif_json_has_the_fit_today_and_candidates). The step's end is held back here to
make that interleaving certain."""

import time

from stagelens.engine_hooks.hooks.recorder import Recorder
from stagelens.lab.scenario_run import run_lab
from stagelens.lab.settings import build_configs

STEP_END_DELAY_S = 0.5


def test_the_last_frame_holds_the_timeline_of_a_request_done_in_the_last_step(model_dir, monkeypatch):
    on_step_end = Recorder.on_step_end

    def late_step_end(self, stats):
        if stats.finished:
            time.sleep(STEP_END_DELAY_S)       # a busy machine: the run returns before the step is recorded
        on_step_end(self, stats)

    monkeypatch.setattr(Recorder, "on_step_end", late_step_end)
    engine_cfg, workload_cfg = build_configs({
        "model": "tiny", "duration": 1.5, "rate": 6, "max_model_len": 256, "prompt_len": "uniform:8:64",
        "output_len": "uniform:4:8", "max_num_seqs": 8, "seed": 3, "model_dir": model_dir})
    timelines: list = []
    result = run_lab(engine_cfg, workload_cfg, listeners=(lambda frame, finished: timelines.extend(finished),))
    assert result.figures["requests_finished"] > 0
    assert len(timelines) == result.figures["requests_finished"]
