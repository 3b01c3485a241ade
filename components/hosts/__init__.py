"""Host steps: the step table, how a step runs over SSH, the scripts, pins, host keys, rolls."""
