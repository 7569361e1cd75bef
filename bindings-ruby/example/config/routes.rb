# frozen_string_literal: true

Rails.application.routes.draw do
  post "/signup", to: "signups#create"
end
