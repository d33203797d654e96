from __future__ import annotations

from django.urls import URLPattern, path

from library import views
from library.report import stream
from library.views import desk

urlpatterns: list[URLPattern] = [
    path("", views.home, name="home"),
    path("branches/<int:branch_id>/", views.branch_detail, name="branch-detail"),
    path("branches/<int:branch_id>/books/", views.branch_books, name="branch-books"),
    path(
        "branches/<int:branch_id>/stock.json",
        views.branch_stock,
        name="branch-stock",
    ),
    path("books/<int:book_id>/", views.book_detail, name="book-detail"),
    path("members/<int:member_id>/", views.member_detail, name="member-detail"),
    path("loans/issue/", desk.loan_issue, name="loan-issue"),
    path("loans/return/", desk.loan_find, name="loan-find"),
    path("loans/<int:loan_id>/return/", desk.loan_return, name="loan-return"),
    # The desk forms' suggestions (static/js/desk.js), each behind the desk's right.
    path(
        "loans/suggest/books.json", desk.desk_suggest_books, name="desk-suggest-books"
    ),
    path(
        "loans/suggest/members.json",
        desk.desk_suggest_members,
        name="desk-suggest-members",
    ),
    path(
        "loans/suggest/loans.json", desk.desk_suggest_loans, name="desk-suggest-loans"
    ),
    # The monthly loans as a streamed CSV (library.report.stream); its address is
    # the one it had while it lived in the realtime app.
    path("realtime/reports/loans.csv", stream.loans_csv, name="report-loans-csv"),
]
