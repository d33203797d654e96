"""The shape of the course's data set in numbers: how many rows, what rules they follow.

``dataset`` writes these rows into a database; the cache-metrics model
(``course.labs.cache_metrics.model``) reasons about the same rows in memory. Both read
the numbers here, so they cannot drift apart. No database, no Django: plain constants.

300 books "Book n" by "Author n % 40 + 1", published 1950 + n % 70, in branch
n % 4 + 1; 200 members; 4000 loans cycling books and members.
"""

from __future__ import annotations

from typing import Final

BOOK_COUNT: Final = 300
LOAN_COUNT: Final = 4000
MEMBER_COUNT: Final = 200
BRANCH_COUNT: Final = 4
AUTHOR_COUNT: Final = 40
FIRST_YEAR: Final = 1950
YEAR_SPAN: Final = 70
