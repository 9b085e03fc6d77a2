"""`benchmarks.chunk_compile`: both sampling programs are captured and compiled, and the fusion
statistics of an optimised program are read correctly."""

import json

from benchmarks import chunk_compile

HLO = """HloModule m

%fused_computation.1 (param_0: f32[5], param_1: f32[5]) -> f32[] {
  %param_0 = f32[5]{0} parameter(0)
  %c = f32[] constant(0)
  %r1 = f32[] reduce(%param_0, %c), dimensions={0}, to_apply=%add
  %param_1 = f32[5]{0} parameter(1)
  %r2 = f32[] reduce(%param_1, %c), dimensions={0}, to_apply=%add
  ROOT %s = f32[] add(%r1, %r2)
}

%fused_computation.2 (param_0: f32[]) -> f32[] {
  %param_0 = f32[] parameter(0)
  ROOT %n = f32[] negate(%param_0)
}

ENTRY %main (p: f32[5]) -> f32[] {
  %p = f32[5]{0} parameter(0)
  %f = f32[] fusion(%p, %p), kind=kLoop, calls=%fused_computation.1
  ROOT %g = f32[] fusion(%f), kind=kLoop, calls=%fused_computation.2
}
"""


def test_fusion_stats_counts_fused_instructions_and_reductions():
    assert chunk_compile.fusion_stats(HLO) == {
        "fusions": 2, "largest_fusion": 6, "max_reductions_in_a_fusion": 2}
    assert chunk_compile.fusion_stats("HloModule m\n") == {}


def test_both_programs_compile_and_are_reported(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert chunk_compile.main(["--sites", "5", "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row == json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["sites"] == 5
    for fw in ("effppl", "numpyro"):
        assert row[fw]["best_cpu_s"] > 0 and len(row[fw]["cpu_s"]) == 1
        # a NUTS program: many fusions, each plate reduction of the 1 group in some fusion
        assert row[fw]["fusions"] > 20
        assert 1 <= row[fw]["max_reductions_in_a_fusion"] <= 6
