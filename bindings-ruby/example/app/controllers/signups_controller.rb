# frozen_string_literal: true

# POST /signup {email}: the user row and the welcome job commit together or not at all.
class SignupsController < ActionController::API
  def create
    user = nil
    ActiveRecord::Base.transaction do
      user = User.create!(email: params.require(:email))
      OJS.enqueue_after_commit("email.welcome", [user.id], queue: "email")
      # A second check after the job was staged: failing it rolls back the user AND the job.
      raise ActiveRecord::Rollback if params[:fail_after_enqueue]
    end
    if user&.persisted? && !params[:fail_after_enqueue]
      render json: { id: user.id }, status: :created
    else
      render json: { error: "rolled back" }, status: :unprocessable_entity
    end
  rescue ActiveRecord::RecordInvalid => e
    render json: { error: e.message }, status: :unprocessable_entity
  end
end
