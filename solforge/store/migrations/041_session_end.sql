-- planner_decisions.ended_at: when the session a 'run' decision started came to its end (the loop
-- writes it as the session returns). NULL on a 'run' row of an interrupted run: that session was cut
-- off, and a resumed run owes the problem the attempts it did not make (solforge/orchestrate/resume.py).
-- NULL on rows older than this migration and on skip/stop rows.
ALTER TABLE planner_decisions ADD COLUMN ended_at TIMESTAMP;
