from __future__ import annotations

from django.urls import URLPattern, path

from library import views

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
    path("loans/issue/", views.loan_issue, name="loan-issue"),
    path("loans/<int:loan_id>/return/", views.loan_return, name="loan-return"),
]
