"""``llm-doctor why SYMPTOM``: a differential diagnosis over the rules tied to one symptom row.

words.py resolves what the user typed to a symptom id; order.py orders the candidate causes
as the articles order the diagnosis; explain.py says why a rule's condition is false, from the
expression itself; differential.py turns probe results and findings into the table
(model.py). All of it is pure over records: results in, a differential out.
"""
