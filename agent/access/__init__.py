"""Who may read which rows: the team's policy file (`AGENT_ACCESS_FILE`), each asker's or channel's
policy, and what the engine is told to enforce for it."""
