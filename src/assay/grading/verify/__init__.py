"""The verifier of agent trials: checks in fresh sandboxes, integrity, canaries, expected
tests, tamper evidence.

Modules (imported by their full names; this file imports nothing):

- ``canaries``: Canary tests: the verifier's proof that the test runner can still fail
  (``is_test_file``, ``is_js_test_file``, ``Canary``, ``plant``, ...)
- ``canary_derive``: Derived canaries: must-fail copies of the task's own tests, which a working
  fix fails (``Mutation``, ``text_sha256``, ``top_level_tests``, ``derive``, ...)
- ``check_run``: Running one acceptance command in a fresh sandbox, the way the verifier needs
  it run (``reporter_source``, ``runner_shadows``, ``strip_bytecode``, ``DerivedPlan``, ...)
- ``expected_tests``: The test ids a check must report, learned from trusted code only
  (``cache_dir``, ``cache_key``, ``collect``, ``derived_plan``, ...)
- ``integrity``: Integrity: what the candidate changed, and whether it touched what it must not
  (``ChangeSet``, ``diff_trees``, ``IntegrityResult``, ``without_ignored``, ...)
- ``judge_check``: ``acceptance.judge``: a pinned judge's verdict on the frozen artifact, as a
  check of the grade (``calibration_status``, ``run_judge_check``)
- ``judge_material``: What a judge reads of an agent trial: the frozen artifact and the recorded
  trajectory, only (``Parts``, ``tree_changes``, ``artifact_parts``, ``rebuilt_tree``, ...)
- ``pytest_boot``: assay's start-up guard for every Python process of a verifier check (never
  imported by assay) (``TrustedFirst``, ``SourceOnlyLoader``, ``source_only_hook``, ``install``)
- ``pytest_reporter``: assay's pytest reporter, loaded into the verifier's test process (never
  imported by assay) (``pytest_configure``, ``pytest_collectreport``,
  ``pytest_collection_modifyitems``, ``pytest_runtest_logreport``, ...)
- ``rebuild``: The delivered tree, rebuilt on the host from the pristine starting tree and the
  frozen tar (``build_workspace``)
- ``reward``: Reading the reward a check's script left in the directory the verifier mounted for
  it (``read_reward``)
- ``tamper_scan``: The tamper scan: evidence, not a verdict (``scan_source``,
  ``scan_workspace``)
- ``test_report``: Reading assay's structured pytest report and deciding a tamper-evident check
  from it (``ParsedReport``, ``parse_report``, ``parse_tap``, ``last_name``, ...)
- ``testcounts``: Reading pass/fail counts from the output of pytest, node's test runner and
  unittest (``parse_counts``, ``counts_say_pass``)
- ``verifier``: The verifier: a verdict on a frozen artifact, from outside the agent's reach
  (``grade_path``, ``run_check``, ``verify``)
"""
