"""The LLM judge: quoted material, the reply contract, calibration, pairs.

Modules (imported by their full names; this file imports nothing):

- ``calibration``: How far a judge can be trusted: its agreement with people, computed once per
  revision (``calibration_path``, ``judgements_path``, ``calibration_for``,
  ``calibration_label``, ...)
- ``endpoint``: Where a judge is reached: its own endpoint, from its own ``judge.yaml``, in this
  process (``judge_base_url``, ``judge_client``)
- ``human``: The human grades a judge is calibrated against: a labelled file, or a rubric-graded
  run (``HumanItem``, ``HumanGrades``, ``load_human_grades``, ``rubric_target``)
- ``pairwise``: Asking a pinned judge which of two candidates is better, in a way its answer can
  be trusted (``pairwise_revision``, ``pairwise_pin``, ``opaque_ids``, ``build_messages``, ...)
- ``reply``: Asking a judge model about one piece of material, so that the material cannot talk
  back (``Material``, ``file_lines``, ``escape``, ``delimiters``, ...)
"""
