"""Grading model answers: narrow-suite scorers and coding-task graders.

Modules (imported by their full names; this file imports nothing):

- ``diff``: Diff tasks: does the candidate's unified diff do what the golden one does?
  (``normalize_diff``, ``apply_diff``, ``grade_diff``)
- ``extract``: Pulling the code (or diff) out of a model's answer, by the suite's fixed rule
  (``fenced_blocks``, ``extract_code``)
- ``labels``: Turning a model's answer text into a label, or into a named reason why it is not
  one (``Parsed``, ``read_text``, ``read_object``, ``parse_answer``)
- ``narrow_check``: ``assay suite check`` on a narrow suite: is the suite sound, before any
  model is blamed? (``Finding``, ``NarrowCheck``, ``check_narrow_suite``, ``names_the_format``)
- ``revisions``: Grading a coding run's recorded answers into a grade revision, never over an
  older one (``settings_of``, ``run_tasks``, ``Revision``, ``GradeSummary``, ...)
- ``score_base``: What every narrow-suite scorer shares: the reading of a reply, the score, the
  protocol and the base class that applies the format contract (``Reading``, ``Score``,
  ``Scorer``, ``ScorerBase``)
- ``scorer_judge``: The ``judge`` scorer: a pinned judge model decides whether each narrow
  answer passes (``judge_of``, ``check_judge_endpoint``, ``calibration_words``, ``passes``, ...)
- ``scorer_rules``: The comparisons behind the narrow scorers: text in its folded form, numbers
  within a tolerance, and the fields of an object, each field by its own rule (``read_number``,
  ``as_json_number``, ``compare_numbers``, ``same_json``, ...)
- ``scorers``: The scorer table of narrow suites: who decides that one answer is right
  (``LabelScorer``, ``NormalizedTextScorer``, ``NumericScorer``, ``JsonFieldsScorer``, ...)
- ``suite_check``: ``assay suite check``: are the tasks themselves sound, before any model is
  blamed? (``TaskCheck``, ``check_task``, ``check_suite``)
- ``table``: Who decides a coding answer: one grader per task type, in one table
  (``SandboxSettings``, ``ExecSettings``, ``extract``, ``grade_code``, ...)
- ``unit``: Unit tasks: the candidate's code followed by the task's tests, run in the sandbox
  (``Verdict``, ``program_text``, ``run_unit``)
"""
