"""The audits `safety.services.audit_run` runs, one module each, over what the platform
recorded and what the agents hold:

- `benchmark_items`: evaluation items in the agent's files (contamination) and in its code and
  checkpoints' chat templates and generation configs (hard-coded outputs);
- `shared_artifacts`: data and weights identical to another agent's, held first by that agent;
- `substitution`: a nominee that is a reference model, or too close to the instruct one;
- `model_card`: the nominee's card against the platform's run log;
- `trajectory_judge`: an LLM judge over the trajectory the platform recorded.

`recording` holds what they share: the run's report and the one way a finding is written;
`agent_files` the one way they reach an agent's files without following what it planted.
"""
