-- The agenda and free/busy read a recurring copy whose series' range, widened by 7
-- days before and 8 after, misses their window only when one of its source's
-- occurrences was moved far from its slot into that window (db/agenda.py): an
-- occurrence moved nearer lies within the widened range. So the index of timed
-- occurrences by where they lie holds only those moved far (db/occurrences.py,
-- `_FAR`, word for word), not every changed occurrence of every user. An all-day
-- occurrence counts as far always; its index stays as it is.
DROP INDEX event_occurrences_moved_times;
CREATE INDEX event_occurrences_moved_far ON event_occurrences
    USING gist (tstzrange(start_time, coalesce(end_time, start_time), '[]'))
    WHERE start_time IS NOT NULL
      AND (original_start - start_time > interval '7 days'
           OR coalesce(end_time, start_time) - original_start > interval '8 days');
